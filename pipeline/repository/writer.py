"""repository stage: write a versioned Triton model repository with latency and throughput config variants.

Layout (for model name M and version V):
    <out>/M/config.pbtxt              the default variant (repository.default_variant)
    <out>/M/configs/latency.pbtxt     tritonserver --model-config-name=latency
    <out>/M/configs/throughput.pbtxt  tritonserver --model-config-name=throughput
    <out>/M/V/model.onnx              the serving target's ONNX at the precision each variant serves (choose.json:
                                      configured, or the fastest that passed parity under `auto`); a variant
                                      that serves another precision than the default one loads
                                      V/model.<precision>.onnx (its default_model_filename)
    <out>/M_trt/...                   TensorRT engines per compute capability (cc_model_filenames), only
                                      when a GPU target built an engine that matches it and passed parity
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from pipeline.core import onnx_tools
from pipeline.repository import config as triton_config
from pipeline.core import atomic
from pipeline.core.config import PipelineConfig, TargetConfig, VariantConfig
from pipeline.core.errors import ParityError, RepositoryError
from pipeline.parity.report import artifact_passed, load_report
from pipeline.core.specs import IOSpec, graph_io
from pipeline.engines.manifest import targets_table
from pipeline.repository import warmup as warmup_mod
from pipeline.repository.served import Served, configured, file_names
from pipeline.repository.trt_model import load_parity, render_trt_model


def check_parity(report_path: Path, kind: str, served: Path) -> dict[str, Any]:
    """Refuse (RepositoryError) to ship ``served`` unless the parity report compared this very file as ``kind`` and it passed."""
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
    compared, sha = report["artifacts"][kind].get("sha256"), atomic.file_digest(served)[0]
    if compared != sha:
        raise RepositoryError(
            f"refusing to ship {served}: the parity report vouches for another {kind} file",
            fix="rerun the gate on this file: dvc repro parity repository",
            details={"served sha256": sha, "parity compared sha256": compared, "report": report_path},
        )
    return {"kind": kind, "report": str(report_path), "verdict": why, "sha256": sha}


def fixed_batch_variant(variant: VariantConfig, inputs: list[IOSpec]) -> tuple[VariantConfig, str | None]:
    """A graph with no dynamic batch axis cannot be batched by Triton: serve it with max_batch_size 0.

    Returns the variant to render and, when it was changed, the note that says so (in the config header
    and the report): the config asked for batching the graph cannot do, and three overrides would be needed.
    """
    fixed = [f"{i.name} {list(i.dims)}" for i in inputs if not i.dims or isinstance(i.dims[0], int)]
    if not fixed or (variant.max_batch_size == 0 and variant.dynamic_batching is None):
        return variant, None
    note = f"max_batch_size 0 and no dynamic batching: the graph has no dynamic batch axis ({', '.join(fixed)}); the config asked for max_batch_size {variant.max_batch_size}" + (
        " with dynamic batching" if variant.dynamic_batching is not None else ""
    )
    return dataclasses.replace(variant, max_batch_size=0, dynamic_batching=None), note


def write_trt_model(cfg: PipelineConfig, engines: Path, parity: Path | None, out: Path) -> dict[str, Any]:
    """Write ``<name><suffix>/`` with every shippable engine; returns which targets are in and why others are not."""
    dirs = {t: engines / t for t in cfg.targets}
    name = cfg.model.name + cfg.repository.trt_model_suffix
    report = load_parity(parity)
    rendered = {key: render_trt_model(name, dirs, getattr(cfg.variants, key), report, cfg.repository.version) for key in ("latency", "throughput")}
    trt = rendered["latency"]
    gpu_dirs = {t: d for t, d in dirs.items() if t not in trt.not_gpu}
    table = targets_table(gpu_dirs, trt.included, trt.excluded) if gpu_dirs else ""
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
    return {"model": name if trt.config is not None else None, "included": trt.included, "excluded": trt.excluded, "precision": trt.precision, "table": table}


def write_repository(
    cfg: PipelineConfig,
    onnx: Path | dict[str, Served],
    out: Path,
    parity: Path | None = None,
    engines: Path | None = None,
) -> dict[str, Any]:
    """Render and write the repository into ``out`` (a temporary directory); returns a summary.

    ``onnx`` is what each variant serves (pipeline/repository/served.py; the stage reads it from choose.json), or one
    file both serve at the configured precision (``model.<serving.precision>.onnx``). With ``parity`` (a
    parity.json), each must be the very file that passed the gate (else RepositoryError). With ``engines``
    (artifacts/engines), GPU targets' engines that passed parity go into a TensorRT model.
    """
    name = cfg.model.name  # a valid directory name: checked at composition
    # Only serving.* (derived from targets[0]): the stage's params in dvc.yaml, so no other target's knob reruns it.
    serving = TargetConfig(name=cfg.serving.target, kind=cfg.serving.kind, precision=cfg.serving.precision)
    served = configured(cfg, onnx) if isinstance(onnx, Path) else dict(onnx)
    names = file_names(served, cfg.repository.default_variant)
    files = {s.precision: s.path for s in served.values()}
    gates = {p: check_parity(parity, p, f) for p, f in files.items()} if parity is not None else {}
    precision = served[cfg.repository.default_variant].precision
    onnx = served[cfg.repository.default_variant].path
    gate = gates.get(precision)
    proto = onnx_tools.load_model(onnx, f"{precision} ONNX model")
    inputs, outputs = graph_io(proto)

    model_dir = out / name
    (model_dir / "configs").mkdir(parents=True)
    version_dir = model_dir / str(cfg.repository.version)
    version_dir.mkdir()
    for p, f in files.items():
        shutil.copyfile(f, version_dir / names[p])
    rendered: dict[str, str] = {}
    derived: dict[str, str] = {}
    rows: dict[bool, warmup_mod.Feed] = {}  # the warmup sample row, per "the config has a batch axis"
    # Each variant's inputs and outputs come from the file it serves (parity holds every file to the reference's).
    io = {p: graph_io(onnx_tools.load_model(f, f"{p} ONNX model")) if f != onnx else (inputs, outputs) for p, f in files.items()}
    for key in ("latency", "throughput"):
        v_in, v_out = io[served[key].precision]
        variant, note = fixed_batch_variant(getattr(cfg.variants, key), v_in)
        pb = triton_config.onnx_model_config(name, v_in, v_out, variant, serving, f"variants.{key}")
        pb.default_model_filename = names[served[key].precision]
        lines = triton_config.describe_variant(variant, serving, served[key].precision)
        lines.insert(1, f"Serves {served[key].precision} ({pb.default_model_filename}): {served[key].reason}.")
        batched = variant.max_batch_size > 0
        if variant.warmup is not None:
            if batched not in rows:
                rows[batched] = warmup_mod.sample_row(cfg.model, v_in, batched)
                warmup_mod.write_files(model_dir, rows[batched], batched)
            warmup_mod.add_warmup(pb, variant.warmup, rows[batched], {i.name: i.data_type for i in pb.input})
        lines.append(warmup_mod.describe(variant.warmup, rows.get(batched) if variant.warmup else None, batched))
        if note:
            derived[key] = note
            lines.insert(1, f"Derived: {note}.")
        rendered[key] = triton_config.render(pb, lines)
        (model_dir / "configs" / f"{key}.pbtxt").write_text(rendered[key], encoding="utf-8")
    (model_dir / "config.pbtxt").write_text(rendered[cfg.repository.default_variant], encoding="utf-8")
    engines_summary = write_trt_model(cfg, engines, parity, out) if engines is not None else None
    return {
        "engines": engines_summary,
        "model": name,
        "version": cfg.repository.version,
        "serving_target": serving.name,
        "precision": precision,
        "served": {
            v: {
                "precision": s.precision,
                "file": f"{cfg.repository.version}/{names[s.precision]}",
                "source_onnx": str(s.path),
                "sha256": atomic.file_digest(s.path)[0],
                "reason": s.reason,
            }
            for v, s in served.items()
        },
        "parity_all": gates,
        "source_onnx": str(onnx),
        "sha256": atomic.file_digest(onnx)[0],
        "parity": gate,
        "default_variant": cfg.repository.default_variant,
        "variants": sorted(rendered),
        "derived": derived,
        "inputs": [{"name": i.name, "dtype": i.dtype, "dims": list(i.dims)} for i in inputs],
        "outputs": [{"name": o.name, "dtype": o.dtype, "dims": list(o.dims)} for o in outputs],
    }


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """What was shipped (dvc metrics); each variant's precision is the choose stage's metric."""
    engines = summary["engines"] or {}
    return {"version": summary["version"], "precision": summary["precision"], "engines_shipped": len(engines.get("included") or {})}
