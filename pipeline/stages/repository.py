"""repository stage: write a versioned Triton model repository with latency and throughput config variants.

Layout (for model name M and version V):
    <out>/M/config.pbtxt              the default variant (repository.default_variant)
    <out>/M/configs/latency.pbtxt     tritonserver --model-config-name=latency
    <out>/M/configs/throughput.pbtxt  tritonserver --model-config-name=throughput
    <out>/M/V/model.onnx              FP32 ONNX for a cpu target, FP16 ONNX for a GPU target
    <out>/M_trt/...                   TensorRT engines per compute capability (cc_model_filenames), only
                                      when a GPU target built an engine that matches it and passed parity
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
from pipeline.core.errors import ParityError, RepositoryError
from pipeline.core.parity import artifact_passed, load_report
from pipeline.core.specs import graph_io
from pipeline.core.stage import main as stage_main
from pipeline.engines_repository import engine_dirs_for, load_parity, render_trt_model, targets_table


def check_parity(report_path: Path, kind: str) -> dict[str, Any]:
    """Refuse (RepositoryError) to ship ``kind`` unless the parity report says it passed."""
    try:
        report = load_report(report_path)
    except ParityError as e:
        raise RepositoryError(f"cannot ship without a parity verdict: {e.what}", fix=e.fix or "run the parity stage") from None
    ok, why = artifact_passed(report, kind)
    if not ok:
        raise RepositoryError(
            f"refusing to ship the {kind} model: it did not pass the parity gate ({why})",
            fix=f"fix the artifact or its tolerance (parity.{kind}.*) and rerun `dvc repro parity`",
            details={"report": report_path},
        )
    return {"kind": kind, "report": str(report_path), "verdict": why}


def write_trt_model(cfg: PipelineConfig, fp16: Path, engines: Path, parity: Path | None, out: Path) -> dict[str, Any]:
    """Write ``<name><suffix>/`` with every shippable engine; returns which targets are in and why others are not."""
    dirs = engine_dirs_for(cfg.targets, cfg.target_specs, engines)
    if not dirs:
        return {"included": {}, "excluded": {}, "table": ""}
    name = cfg.model.name + cfg.repository.trt_model_suffix
    report = load_parity(parity)
    rendered = {
        key: render_trt_model(name, fp16, dirs, cfg.target_specs, getattr(cfg.variant, key), report, cfg.repository.version)
        for key in ("latency", "throughput")
    }
    trt = rendered["latency"]
    table = targets_table(dirs, trt)
    if trt.config is not None:
        model_dir = out / name
        (model_dir / "configs").mkdir(parents=True)
        for src, rel in trt.files:
            (model_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, model_dir / rel)
        for key, model in rendered.items():
            assert model.config is not None
            text = triton_config.render(model.config, [f"Variant '{key}': TensorRT engines per compute capability.", *model.notes])
            (model_dir / "configs" / f"{key}.pbtxt").write_text(text, encoding="utf-8")
        default = (model_dir / "configs" / f"{cfg.repository.default_variant}.pbtxt").read_text(encoding="utf-8")
        (model_dir / "config.pbtxt").write_text(default, encoding="utf-8")
    return {"model": name if trt.config is not None else None, "included": trt.included, "excluded": trt.excluded, "table": table}


def write_repository(
    cfg: PipelineConfig, fp32: Path, fp16: Path, out: Path, parity: Path | None = None, engines: Path | None = None
) -> dict[str, Any]:
    """Render and write the repository into ``out`` (a temporary directory); returns a summary.

    With ``parity`` (a parity.json), the model to ship must have passed it (else RepositoryError).
    With ``engines`` (artifacts/engines), GPU targets' engines that passed parity go into a TensorRT model.
    """
    name = cfg.model.name
    if not name or "/" in name or name.startswith("."):
        raise RepositoryError(f"model.name '{name}' is not a valid Triton model directory name", fix="set model.name to a plain name")
    serving = cfg.target_specs[cfg.targets[0]]  # the ONNX Runtime model serves the first target of the fleet
    if serving.precision not in ("fp32", "fp16"):
        raise RepositoryError(f"target_specs.{serving.name}.precision='{serving.precision}'", fix="use fp32 or fp16")
    src = fp16 if serving.precision == "fp16" else fp32
    gate = check_parity(parity, serving.precision) if parity is not None else None
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
    engines_summary = write_trt_model(cfg, fp16, engines, parity, out) if engines is not None else None
    return {
        "engines": engines_summary,
        "model": name,
        "version": cfg.repository.version,
        "serving_target": serving.name,
        "precision": serving.precision,
        "source_onnx": str(src),
        "parity": gate,
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
    # Optional only so older callers keep working; dvc.yaml always passes it.
    p.add_argument("--parity", type=Path, help="parity.json: refuse to ship a model that did not pass it")
    p.add_argument("--engines", type=Path, help="artifacts/engines: <target>/{manifest.json,model.plan} per GPU target")


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    with atomic.atomic_path(a.out) as tmp:
        tmp.mkdir()
        summary = write_repository(cfg, a.fp32, a.fp16, tmp, a.parity, a.engines)
    atomic.write_json(a.report, summary)
    print(f"[repository] {a.out}/{summary['model']}/{summary['version']} ({summary['precision']}, target {summary['serving_target']})")
    print(json.dumps({"variants": summary["variants"], "default": summary["default_variant"]}))
    if summary["engines"] and summary["engines"]["table"]:
        print("[repository] TensorRT targets:\n" + summary["engines"]["table"])


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m pipeline.stages.repository --params ... --fp32 ... --fp16 ... --out ... --report ...``."""
    return stage_main("repository", __doc__, _args, _body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
