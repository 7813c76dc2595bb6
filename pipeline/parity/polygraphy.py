"""Thin wrappers around Polygraphy: runners, Comparator.run / compare_accuracy, JSON goldens.

Runners: the PyTorch reference on CPU (our own runner on Polygraphy's BaseRunner, because
Polygraphy's PytRunner moves every input to CUDA), ONNX Runtime (Polygraphy's OnnxrtRunner)
and TensorRT (Polygraphy's TrtRunner; tensorrt is imported only when an engine is run).
Polygraphy failures (its G_LOGGER.critical raises PolygraphyException) become ParityError.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from polygraphy.backend.base import BaseRunner
from polygraphy.common import TensorMetadata
from polygraphy.comparator import Comparator, RunResults, SimpleCompareFunc
from polygraphy.exception import PolygraphyException
from polygraphy.logger import G_LOGGER

from pipeline.core import atomic, model_outputs
from pipeline.core.samples import contiguous
from pipeline.core.config import TensorSpec
from pipeline.core.errors import ParityError
from pipeline.core.polygraphy_json import load_json, numpy_first, save_json
from pipeline.engines.trt import available

numpy_first()  # every runner and the Comparator ask each array whether it is a torch.Tensor

Feed = dict[str, np.ndarray]


class TorchCpuRunner(BaseRunner):
    """Runs an ``nn.Module`` on the CPU in float32 under ``torch.no_grad``: the parity reference."""

    def __init__(self, build: Callable[[], Any], inputs: list[TensorSpec], output_names: list[str], name: str = "reference") -> None:
        super().__init__(name=name, prefix="torch-cpu-runner")
        self._build = build
        self._inputs = inputs
        self.output_names = list(output_names)

    def activate_impl(self) -> None:
        self.module = self._build().eval()

    def get_input_metadata_impl(self) -> TensorMetadata:
        meta = TensorMetadata()
        for s in self._inputs:
            # Named (dynamic) axes are unknown: None lets any size through Polygraphy's input check.
            meta.add(s.name, np.dtype(s.dtype), [d if isinstance(d, int) else None for d in s.shape])
        return meta

    def infer_impl(self, feed_dict: Feed) -> OrderedDict[str, np.ndarray]:
        import torch

        args = [torch.from_numpy(contiguous(feed_dict[s.name])) for s in self._inputs]
        start = time.perf_counter()
        with torch.no_grad():
            out = self.module(*args)
        self.inference_time = time.perf_counter() - start
        outs, fields = model_outputs.flatten(out)
        if len(outs) != len(self.output_names):
            what, fix = model_outputs.count_problem(fields, len(outs), list(self.output_names))
            raise ParityError(f"the reference {what.removeprefix('the ')}", fix=fix, details={"model.outputs": self.output_names})
        return OrderedDict((n, o.detach().cpu().numpy()) for n, o in zip(self.output_names, outs))

    def deactivate_impl(self) -> None:
        del self.module


def onnxrt_runner(path: Path, name: str) -> BaseRunner:
    """Polygraphy's OnnxrtRunner on the CPU provider, the model read lazily from ``path``."""
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    return OnnxrtRunner(SessionFromOnnx(str(path), providers=["CPUExecutionProvider"]), name=name)


def trt_runner(plan: Path, name: str) -> tuple[BaseRunner | None, str]:
    """Polygraphy's TrtRunner on a serialized engine, or (None, why) when tensorrt does not import here."""
    trt, why = available()
    if trt is None:  # the CPU machines cannot install TensorRT
        return None, f"tensorrt is not importable here ({why})"
    from polygraphy.backend.common import BytesFromPath
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    return TrtRunner(EngineFromBytes(BytesFromPath(str(plan))), name=name), ""


@contextmanager
def quiet(verbose: bool = False) -> Iterator[None]:
    """Polygraphy logs every sample at INFO and each mismatch at ERROR; our table and gate message say it once."""
    old = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.INFO if verbose else G_LOGGER.CRITICAL
    try:
        yield
    finally:
        G_LOGGER.module_severity = old


def run(runner: BaseRunner, feeds: list[Feed], what: str) -> RunResults:
    """``Comparator.run`` for one runner over ``feeds``; Polygraphy/runtime failures become ParityError."""
    try:
        return Comparator.run([runner], data_loader=feeds)
    except ParityError:
        raise
    except (PolygraphyException, RuntimeError, ValueError, TypeError, OSError) as e:  # ORT/TRT/torch raise these
        raise ParityError(
            f"the {what} could not be run on the parity samples",
            fix="check the artifact and the sample inputs (model.inputs, model.data) against the graph",
            details={"error": str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__},
        ) from None


def compare_func(atol: dict[str, float], rtol: dict[str, float], stat: dict[str, str], quantile: dict[str, float]) -> SimpleCompareFunc:
    """Polygraphy's simple comparison with per-output dicts ("" = default for unlisted outputs).

    SimpleCompareFunc is what ``CompareFunc.simple`` builds (the latter is deprecated in Polygraphy 0.53).
    """
    return SimpleCompareFunc(atol=atol, rtol=rtol, check_error_stat=stat, error_quantile=quantile, infinities_compare_equal=False)


def compare(reference: RunResults, artifact: RunResults, func: SimpleCompareFunc) -> list[OrderedDict[str, Any]]:
    """``Comparator.compare_accuracy`` of ``artifact`` (first, so its outputs are iterated) against ``reference``.

    rtol is relative to the second runner, i.e. to the reference. Returns one
    ``{output_name: OutputCompareResult}`` per sample.
    """
    ((ref_name, ref_iters),) = list(reference.items())
    ((art_name, art_iters),) = list(artifact.items())
    if len(ref_iters) != len(art_iters):
        raise ParityError(f"{art_name} has {len(art_iters)} results for {len(ref_iters)} reference samples")
    combined = RunResults()
    combined.append((art_name, art_iters))
    combined.append((ref_name, ref_iters))
    try:
        # Relative errors against exact-zero reference values are huge by design (Polygraphy divides by
        # 2.2e-16); numpy's overflow warnings while squaring them for its statistics are noise.
        with np.errstate(over="ignore", invalid="ignore"):
            acc = Comparator.compare_accuracy(combined, comparisons=[(0, 1)], compare_func=func)
    except PolygraphyException as e:
        raise ParityError(f"Polygraphy could not compare {art_name} with {ref_name}", details={"error": str(e).strip().splitlines()[0]}) from None
    return list(acc[0][(art_name, ref_name)])


def save_goldens(feeds: list[Feed], reference: RunResults, inputs_path: Path, reference_path: Path) -> None:
    """Save inputs (Polygraphy inputs JSON) and reference outputs (RunResults JSON) atomically.

    The same files ``polygraphy run --load-inputs inputs.json --load-outputs reference.json`` reads.
    """
    with atomic.atomic_path(inputs_path, suffix=".json") as tmp:
        save_json([OrderedDict(f) for f in feeds], str(tmp), description="parity inputs")
    with atomic.atomic_path(reference_path, suffix=".json") as tmp:
        reference.save(str(tmp))


def load_goldens(inputs_path: Path, reference_path: Path) -> tuple[list[Feed], RunResults]:
    """Read goldens written by :func:`save_goldens`; raise ParityError naming the missing or bad file."""
    for p in (inputs_path, reference_path):
        if not p.is_file():
            raise ParityError(
                f"golden file not found: {p}",
                fix="run the parity stage once with the reference model (or `dvc pull` its outputs) before --goldens-only",
            )
    try:
        feeds = [dict(f) for f in load_json(str(inputs_path), description="parity inputs")]
        reference = RunResults.load(str(reference_path))
    except (PolygraphyException, ValueError, TypeError, OSError) as e:
        raise ParityError("cannot read the parity goldens", details={"inputs": inputs_path, "reference": reference_path, "error": str(e).splitlines()[0]}) from None
    ((_, iters),) = list(reference.items())
    if len(iters) != len(feeds):
        raise ParityError(
            "the goldens disagree: reference outputs and inputs have different sample counts",
            details={"inputs": len(feeds), "reference": len(iters)},
            fix="regenerate both with the parity stage",
        )
    return feeds, reference


def outputs(results: RunResults) -> list[dict[str, np.ndarray]]:
    """Per-sample output arrays of a one-runner RunResults."""
    ((_, iters),) = list(results.items())
    return [{k: np.asarray(v) for k, v in it.items()} for it in iters]
