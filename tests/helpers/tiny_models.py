"""Tiny models built in the tests (no downloads): factories referenced by `_target_` in test configs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn


class TinyMLP(nn.Module):
    """Linear-GELU-Linear with LayerNorm: small, but exercises the FP16 converter."""

    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.norm(self.fc1(x))))


def build_mlp(features: int = 8, hidden: int = 16, classes: int = 4, seed: int = 0) -> nn.Module:
    """Deterministic TinyMLP."""
    torch.manual_seed(seed)
    return TinyMLP(features, hidden, classes).eval()


def not_a_module() -> str:
    """A factory that returns the wrong thing."""
    return "oops"


class Payload:
    """An arbitrary Python object: unpickling it is what weights_only=True refuses."""

    def __init__(self) -> None:
        self.data = [1, 2, 3]


def mlp_samples(features: int = 8) -> list[dict[str, np.ndarray]]:
    """A model.data hook: real-looking samples in two batch sizes."""
    rng = np.random.default_rng(1)
    return [{"x": rng.normal(size=(b, features)).astype(np.float32)} for b in (2, 3)]


def export_tiny_onnx(path: str, features: int = 8, input_name: str = "x", output_name: str = "y") -> str:
    """Write a TinyMLP ONNX with a dynamic batch axis to ``path``."""
    import warnings

    model = build_mlp(features)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.randn(2, features),),
            path,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    return path


def two_io_onnx(path: str, seed: int = 0, batch: int | str = "batch") -> str:
    """Two inputs a, b [batch, 4] and two outputs s = tanh(a @ W + b), p = a * b; ``batch`` an int fixes the batch axis."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 4], rng.standard_normal((4, 4)).astype(np.float32).ravel())
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["a", "W"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["z"]),
            helper.make_node("Tanh", ["z"], ["s"]),
            helper.make_node("Mul", ["a", "b"], ["p"]),
        ],
        "two_io",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, 4]) for n in ("a", "b")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, 4]) for n in ("s", "p")],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


class TinyEmbedder(nn.Module):
    """Linear-ReLU-Linear to an L2-normalised embedding, with one outlier output channel in the second layer.

    fc2's output channel 0 has weights ``outlier`` times the others and is scaled back after the layer (a Mul the
    quantizer leaves alone), as activation-outlier channels are in real transformers. Per-tensor weight quantization
    gives the whole of fc2 one scale set by that channel, which rounds every other channel's weights to a few levels:
    the embedding breaks. Per-channel quantization, or fc2 kept FP32, does not.
    """

    def __init__(self, features: int = 16, hidden: int = 32, dim: int = 16, outlier: float = 1000.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, dim, bias=False)
        with torch.no_grad():
            self.fc2.weight[0] *= outlier
        rescale = torch.ones(dim)
        rescale[0] = 1.0 / outlier
        self.register_buffer("rescale", rescale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.fc2(torch.relu(self.fc1(x))) * self.rescale
        return nn.functional.normalize(e, p=2.0, dim=1)


def build_embedder(features: int = 16, outlier: float = 1000.0, seed: int = 0) -> nn.Module:
    """Deterministic TinyEmbedder."""
    torch.manual_seed(seed)
    return TinyEmbedder(features, outlier=outlier).eval()


def embedder_samples(
    features: int = 16, rows: int = 48, dtype: str = "float32", repeat: bool = False, quiet_every: int = 0, quiet_at: tuple[int, ...] = (), quiet: float = 0.05
) -> list[dict[str, np.ndarray]]:
    """A model.data hook for TinyEmbedder: ``rows`` rows of real-looking inputs in batches of 8, 16 and the rest
    (``features`` and ``dtype`` other than the model's make samples that do not fit it; ``repeat``: every row twice
    in a row, so the held-out rows copy calibration rows; row i with ``i % quiet_every in quiet_at`` is scaled by
    ``quiet``: a quiet input, which activation ranges set by the others round more coarsely)."""
    rng = np.random.default_rng(3)
    sizes = [8, 16, max(rows - 24, 1)] if rows > 24 else [rows]
    feeds = [{"x": rng.normal(size=(b // 2 if repeat else b, features)).astype(dtype)} for b in sizes]
    if quiet_every:
        i = 0
        for f in feeds:
            for r in range(f["x"].shape[0]):
                f["x"][r] *= quiet if i % quiet_every in quiet_at else 1.0
                i += 1
    return [{"x": np.repeat(f["x"], 2, axis=0)} for f in feeds] if repeat else feeds


def qdq_onnx(src: str | Path, out: str | Path, features: int = 16) -> Path:
    """``src`` (input x [batch, features]) quantized to a QDQ ONNX by ONNX Runtime, calibrated on seeded random rows:
    the kind of file the int8 stage writes, for engine tests that need Q/DQ nodes."""
    import logging

    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    class Reader:
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.feeds = iter([{"x": rng.normal(size=(4, features)).astype(np.float32)} for _ in range(2)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    logging.disable(logging.WARNING)  # the quantizer's pre-processing hint
    try:
        quantize_static(
            str(src),
            str(out),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Gemm"],
            extra_options={"ActivationSymmetric": True},
        )
    finally:
        logging.disable(logging.NOTSET)
    return Path(out)


class TinyTanh(nn.Module):
    """y = tanh(x @ W + b): the PyTorch model of tests/tiny_triton.py's tiny ONNX file, with the same weights."""

    def __init__(self, seed: int = 0, features: int = 16, out: int = 8) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)  # drawn in tiny_onnx's order: W, then B
        w = rng.standard_normal((features, out)).astype(np.float32)
        b = rng.standard_normal(out).astype(np.float32)
        self.fc = nn.Linear(features, out)
        with torch.no_grad():
            self.fc.weight.copy_(torch.from_numpy(w.T.copy()))
            self.fc.bias.copy_(torch.from_numpy(b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))


def build_tiny_tanh(seed: int = 0) -> nn.Module:
    """A factory for TinyTanh (the TorchServe native deployment of the tiny bench model)."""
    return TinyTanh(seed).eval()


class _FieldsOut(dict):
    """A mapping output like a Hugging Face ``ModelOutput``: fields in the order the model sets them."""


class _MappingMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = build_mlp()

    def forward(self, x: torch.Tensor) -> _FieldsOut:
        return _FieldsOut(logits=self.body(x), hidden=None)  # an unset field is left out, as ModelOutput does


def build_mapping_mlp() -> nn.Module:
    """The tiny MLP returning a mapping with one set field, ``logits`` (a classifier head's ModelOutput)."""
    return _MappingMLP()
