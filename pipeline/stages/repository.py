"""repository stage: write a versioned Triton model repository with latency and throughput config variants.

Layout (for model name M and version V):
    <out>/M/config.pbtxt              the default variant (repository.default_variant)
    <out>/M/configs/latency.pbtxt     tritonserver --model-config-name=latency
    <out>/M/configs/throughput.pbtxt  tritonserver --model-config-name=throughput
    <out>/M/V/model.onnx              FP32 ONNX for a cpu target, FP16 ONNX for a GPU target
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from pipeline.adapters import onnx_tools, triton_config
from pipeline.core import atomic
from pipeline.core.config import PipelineConfig, load_config
from pipeline.core.errors import RepositoryError
from pipeline.core.specs import graph_io
from pipeline.core.stage import main as stage_main


def write_repository(cfg: PipelineConfig, fp32: Path, fp16: Path, out: Path) -> dict[str, Any]:
    """Render and write the repository into ``out`` (a temporary directory); returns a summary."""
    name = cfg.model.name
    if not name or "/" in name or name.startswith("."):
        raise RepositoryError(f"model.name '{name}' is not a valid Triton model directory name", fix="set model.name to a plain name")
    serving = cfg.target_specs[cfg.targets[0]]  # the ONNX Runtime model serves the first target of the fleet
    if serving.precision not in ("fp32", "fp16"):
        raise RepositoryError(f"target_specs.{serving.name}.precision='{serving.precision}'", fix="use fp32 or fp16")
    src = fp16 if serving.precision == "fp16" else fp32
    proto = onnx_tools.load_model(src, f"{serving.precision} ONNX model")
    inputs, outputs = graph_io(proto)

    model_dir = out / name
    (model_dir / "configs").mkdir(parents=True)
    version_dir = model_dir / str(cfg.repository.version)
    version_dir.mkdir()
    shutil.copyfile(src, version_dir / "model.onnx")
    rendered: dict[str, str] = {}
    for key in ("latency", "throughput"):
        variant = getattr(cfg.variant, key)
        pb = triton_config.onnx_model_config(name, inputs, outputs, variant, serving, f"variant.{key}")
        rendered[key] = triton_config.render(pb, triton_config.describe_variant(variant, serving, serving.precision))
        (model_dir / "configs" / f"{key}.pbtxt").write_text(rendered[key], encoding="utf-8")
    (model_dir / "config.pbtxt").write_text(rendered[cfg.repository.default_variant], encoding="utf-8")
    return {
        "model": name,
        "version": cfg.repository.version,
        "serving_target": serving.name,
        "precision": serving.precision,
        "source_onnx": str(src),
        "default_variant": cfg.repository.default_variant,
        "variants": sorted(rendered),
        "inputs": [{"name": i.name, "dtype": i.dtype, "dims": list(i.dims)} for i in inputs],
        "outputs": [{"name": o.name, "dtype": o.dtype, "dims": list(o.dims)} for o in outputs],
    }


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fp32", required=True, type=Path, help="simplified FP32 ONNX")
    p.add_argument("--fp16", required=True, type=Path, help="FP16 ONNX")
    p.add_argument("--out", required=True, type=Path, help="model repository directory to write")
    p.add_argument("--report", required=True, type=Path, help="JSON summary")


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    with atomic.atomic_path(a.out) as tmp:
        tmp.mkdir()
        summary = write_repository(cfg, a.fp32, a.fp16, tmp)
    atomic.write_json(a.report, summary)
    print(f"[repository] {a.out}/{summary['model']}/{summary['version']} ({summary['precision']}, target {summary['serving_target']})")
    print(json.dumps({"variants": summary["variants"], "default": summary["default_variant"]}))


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m pipeline.stages.repository --params ... --fp32 ... --fp16 ... --out ... --report ...``."""
    return stage_main("repository", __doc__, _args, _body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
