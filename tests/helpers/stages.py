"""The stages' command lines and the precision files parity reads, for the tests that run a stage's ``main`` or process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.core.config import PipelineConfig


def build_precisions(cfg: PipelineConfig, d: Path, exported: dict[str, Path] | None = None) -> dict[str, Path]:
    """export -> simplify -> fp16 with the stage functions, into ``d`` (``model.{raw,sim,fp16}.onnx`` and ``fp16.json``).

    ``exported``: the ``raw`` and ``sim`` files of this very config already built (conftest's ``minilm_onnx``), copied
    instead of exported and simplified again.
    """
    from pipeline.convert import export, fp16, simplify

    p = {k: d / f"model.{k}.onnx" for k in ("raw", "sim", "fp16")}
    if exported is not None:
        for k in ("raw", "sim"):
            shutil.copyfile(exported[k], p[k])
    else:
        export.run_export(cfg.model, cfg.export, p["raw"])
        simplify.simplify(p["raw"], p["sim"], cfg.simplify, cfg.model)
    rep = fp16.run_fp16(p["sim"], p["fp16"], cfg.precision, cfg.model)
    (d / "fp16.json").write_text(json.dumps(rep, default=str))
    return p


def parity_args(params: Path, d: Path, source: Path, *extra: str, **artifacts: Path) -> list[str]:
    """The parity stage's arguments: ``source`` the exported ONNX, ``artifacts`` by precision (``fp32=``, ``fp16=``,
    ``int8=``); its inputs, reference and report (``parity.json``) go to ``d``."""
    return [
        *("--params", str(params), "--source-onnx", str(source)),
        *(arg for kind, path in artifacts.items() for arg in (f"--{kind}", str(path))),
        *("--inputs", str(d / "inputs.json"), "--reference", str(d / "reference.json"), "--report", str(d / "parity.json")),
        *extra,
    ]


def bench_args(params: Path, repository: Path, out: Path, *extra: str) -> list[str]:
    """The bench stage's arguments: ``repository`` measured, ``out/bench.json`` and ``out/{bench,curves}/`` written."""
    return [
        *("--params", str(params), "--repository", str(repository), "--out-json", str(out / "bench.json")),
        *("--out-dir", str(out / "bench"), "--curves-dir", str(out / "curves")),
        *extra,
    ]
