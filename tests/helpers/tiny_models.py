"""Tiny models built in the tests (no downloads): factories referenced by `_target_` in test configs."""

from __future__ import annotations

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
            model, (torch.randn(2, features),), path, input_names=[input_name], output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}}, opset_version=17, dynamo=False,
        )
    return path


def two_io_onnx(path: str, seed: int = 0, batch: int | str = "batch") -> str:
    """Two inputs a, b [batch, 4] and two outputs s = tanh(a @ W + b), p = a * b; ``batch`` an int fixes the batch axis."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 4], rng.standard_normal((4, 4)).astype(np.float32).ravel())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
         helper.make_node("Tanh", ["z"], ["s"]), helper.make_node("Mul", ["a", "b"], ["p"])],
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
