"""simplify stage: onnxsim with its own numerical check; node counts before/after in a JSON report."""

from __future__ import annotations

import importlib.abc
import shutil
import sys
import time
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.core import onnx_tools
from pipeline.core.config import ModelConfig, SimplifyConfig
from pipeline.core.errors import SimplifyError
from pipeline.core.samples import input_specs, load_samples
from pipeline.core.specs import graph_io, op_counts

SKIP_HINT = "set simplify.enabled=false to ship the exported graph unsimplified"


class _HoldOffTorch(importlib.abc.MetaPathFinder):
    """An import hook that answers ``import torch`` with ModuleNotFoundError while it is installed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"torch held off while onnxsim is imported ({fullname})", name=fullname)
        return None


def import_onnxsim() -> ModuleType:
    """``import onnxsim`` without its optional PPQ probe's torch import.

    onnxsim's package import tries ``import torch`` (then PPQ, which is not installed) only to set a flag for its
    PPQ quantization helpers, which this project never calls: about 1.1 s of CPU in every simplify process. The probe
    catches the ImportError, so torch is held off for the import alone and released at once; a later
    ``import torch``, here or in onnxsim, works as before. A process that already imported torch imports onnxsim as usual.
    """
    if "onnxsim" in sys.modules or "torch" in sys.modules:
        import onnxsim

        return onnxsim
    hold = _HoldOffTorch()
    sys.meta_path.insert(0, hold)
    try:
        import onnxsim
    finally:
        sys.meta_path.remove(hold)
    return onnxsim


def simplify(src: Path, out: Path, cfg: SimplifyConfig, model: ModelConfig) -> dict[str, Any]:
    """Simplify ``src`` into ``out`` (a temporary path); raise :class:`SimplifyError` naming the skip key."""
    before = onnx_tools.load_model(src, "exported model")
    report: dict[str, Any] = {"enabled": cfg.enabled, "nodes_before": len(before.graph.node), "ops_before": op_counts(before)}
    if not cfg.enabled:
        shutil.copyfile(src, out)
        return {**report, "nodes_after": report["nodes_before"], "ops_after": report["ops_before"]}
    onnxsim = import_onnxsim()
    inputs, _ = graph_io(before)
    # onnxsim's check feeds random data by default; token ids need real values (random ids overflow the
    # embedding Gather), so the check runs on a real sample with its real shapes.
    sample = load_samples(model, input_specs(model, inputs), count=1)[0]
    t0 = time.perf_counter()
    try:
        simplified, ok = onnxsim.simplify(
            before,
            check_n=cfg.check_n,
            input_data=sample,
            skip_shape_inference=cfg.skip_shape_inference,
            test_input_shapes={k: list(v.shape) for k, v in sample.items()},
        )
    except Exception as e:  # noqa: BLE001 - onnxsim raises RuntimeError/ValueError/AssertionError from its C++ core
        raise SimplifyError(
            "onnxsim failed on the exported model",
            fix=SKIP_HINT,
            details={"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"},
        ) from None
    if not ok:
        raise SimplifyError(
            f"onnxsim's own check failed: the simplified model's outputs differ from the original on {cfg.check_n} inputs",
            fix=SKIP_HINT + " (or simplify.check_n=0 to skip only the check, not recommended)",
        )
    onnx_tools.save_model(simplified, out)
    onnx_tools.check_model(out, "simplified model")
    onnx_tools.session(out, "simplified model")
    return {
        **report,
        "nodes_after": len(simplified.graph.node),
        "ops_after": op_counts(simplified),
        "check_n": cfg.check_n,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Node counts before and after (dvc metrics)."""
    return {k: report[k] for k in ("enabled", "nodes_before", "nodes_after") if k in report}
