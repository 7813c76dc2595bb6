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
    <out>/M_text/...                  the text endpoint (text in, M's outputs out), when model.tokenizer is set
                                      (pipeline/repository/text_endpoint.py)
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core import onnx_tools
from pipeline.repository import config as triton_config
from pipeline.core import atomic
from pipeline.core.config import PipelineConfig, TargetConfig, VariantConfig
from pipeline.core.errors import ParityError, RepositoryError
from pipeline.core.specs import IOSpec, graph_io
from pipeline.engines.manifest import targets_table
from pipeline.records.parity import ParityReport, read_report
from pipeline.repository import warmup as warmup_mod
from pipeline.repository.served import Served, configured, file_names
from pipeline.repository.text_endpoint import write_text_model
from pipeline.repository.trt_model import load_parity, render_trt_model

VARIANTS = ("latency", "throughput")
GraphIO = tuple[list[IOSpec], list[IOSpec]]


def read_parity(report_path: Path) -> ParityReport:
    """The parity report the served files must pass; raises RepositoryError when it is missing or unreadable."""
    try:
        return read_report(report_path)
    except ParityError as e:
        raise RepositoryError(f"cannot ship without a parity verdict: {e.what}", fix=e.fix or "run the parity stage") from None


def check_parity(report: ParityReport, report_path: Path, kind: str, served: Path) -> dict[str, Any]:
    """Refuse (RepositoryError) to ship ``served`` unless the parity report compared this very file as ``kind`` and it passed."""
    ok, why = report.verdict(kind)
    if not ok:
        raise RepositoryError(
            f"refusing to ship the {kind} model: it did not pass the parity gate ({why})",
            fix=f"fix the artifact or its tolerance (parity.{kind}.*) and rerun `dvc repro parity`",
            details={"report": report_path},
        )
    compared, sha = report.artifacts[kind].sha256, atomic.file_digest(served)[0]
    if compared != sha:
        raise RepositoryError(
            f"refusing to ship {served}: the parity report vouches for another {kind} file",
            fix="rerun the gate on this file: dvc repro parity repository",
            details={"served sha256": sha, "parity compared sha256": compared, "report": report_path},
        )
    return {"kind": kind, "report": str(report_path), "verdict": why, "sha256": sha}


def check_text_parity(report: ParityReport, report_path: Path, tokenizer_sha: str) -> None:
    """Refuse (RepositoryError) to ship the text endpoint unless parity passed it with this very tokenizer file."""
    text = report.text_endpoint
    fix = "rerun the gate on this tokenizer: dvc repro parity repository (or set model.tokenizer=null for no text endpoint)"
    if text is None:
        raise RepositoryError("refusing to ship the text endpoint: the parity report has no verdict on it", fix=fix, details={"report": report_path})
    if not text.passed:
        raise RepositoryError(f"refusing to ship the text endpoint: it did not pass the parity gate ({text.reason})", fix=fix, details={"report": report_path})
    if text.tokenizer_sha256 != tokenizer_sha:
        raise RepositoryError(
            "refusing to ship the text endpoint: the parity report vouches for another tokenizer file",
            fix=fix,
            details={"shipped sha256": tokenizer_sha, "parity checked sha256": text.tokenizer_sha256, "report": report_path},
        )


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
    # Only serving.* (derived from targets[0]): the stage's params in dvc.yaml, so no other target's knob reruns it.
    serving = TargetConfig(name=cfg.serving.target, kind=cfg.serving.kind, precision=cfg.serving.precision)
    shipped = _Shipped.of(cfg, onnx, parity)
    model_dir = out / cfg.model.name  # a valid directory name: checked at composition
    (model_dir / "configs").mkdir(parents=True)
    version_dir = model_dir / str(cfg.repository.version)
    version_dir.mkdir()
    for s in shipped.files():
        shutil.copyfile(s.path, version_dir / shipped.names[s.precision])
    configs = _VariantConfigs(cfg, model_dir, serving)
    for key in VARIANTS:
        s = shipped.served[key]
        configs.write(key, s, shipped.names[s.precision], shipped.io[s.precision])
    (model_dir / "config.pbtxt").write_text(configs.rendered[cfg.repository.default_variant], encoding="utf-8")
    engines_summary = write_trt_model(cfg, engines, parity, out) if engines is not None else None
    io = shipped.io[shipped.served[cfg.repository.default_variant].precision]
    text = write_text_model(cfg, out, configs.variants, io) if cfg.model.tokenizer is not None else None
    if text is not None and parity is not None:
        check_text_parity(read_parity(parity), parity, text.tokenizer_sha256)
    return {**_summary(cfg, serving, shipped, configs, engines_summary), "text_endpoint": text.to_json() if text else None}


@dataclass(frozen=True)
class _Shipped:
    """What the ONNX Runtime model ships: each variant's file, each precision's file name in the version directory,
    the parity verdict of each file (empty without a parity report), and each file's graph inputs and outputs."""

    served: dict[str, Served]
    names: dict[str, str]
    gates: dict[str, dict[str, Any]]
    io: dict[str, GraphIO]

    @classmethod
    def of(cls, cfg: PipelineConfig, onnx: Path | dict[str, Served], parity: Path | None) -> _Shipped:
        """Raises RepositoryError when a file did not pass ``parity``, and OnnxModelError when one does not load."""
        served = configured(cfg, onnx) if isinstance(onnx, Path) else dict(onnx)
        files = {s.precision: s.path for s in served.values()}
        gates: dict[str, dict[str, Any]] = {}
        if parity is not None:
            report = read_parity(parity)
            gates = {p: check_parity(report, parity, p, f) for p, f in files.items()}
        # Each variant's inputs and outputs come from the file it serves (parity holds every file to the reference's).
        io = {p: graph_io(onnx_tools.load_model(f, f"{p} ONNX model")) for p, f in files.items()}
        return cls(served, file_names(served, cfg.repository.default_variant), gates, io)

    def files(self) -> list[Served]:
        """One per precision served (two variants may serve the same file)."""
        return list({s.precision: s for s in self.served.values()}.values())


def _summary(cfg: PipelineConfig, serving: TargetConfig, shipped: _Shipped, configs: _VariantConfigs, engines: dict[str, Any] | None) -> dict[str, Any]:
    """The repository report: what each variant serves and why, the parity verdicts, the configs, the graph's I/O."""
    default = shipped.served[cfg.repository.default_variant]
    inputs, outputs = shipped.io[default.precision]
    return {
        "engines": engines,
        "model": cfg.model.name,
        "version": cfg.repository.version,
        "serving_target": serving.name,
        "precision": default.precision,
        "served": {v: _served_entry(s, f"{cfg.repository.version}/{shipped.names[s.precision]}") for v, s in shipped.served.items()},
        "parity_all": shipped.gates,
        "source_onnx": str(default.path),
        "sha256": atomic.file_digest(default.path)[0],
        "parity": shipped.gates.get(default.precision),
        "default_variant": cfg.repository.default_variant,
        "variants": sorted(configs.rendered),
        "derived": configs.derived,
        "inputs": [{"name": i.name, "dtype": i.dtype, "dims": list(i.dims)} for i in inputs],
        "outputs": [{"name": o.name, "dtype": o.dtype, "dims": list(o.dims)} for o in outputs],
    }


def _served_entry(s: Served, file: str) -> dict[str, Any]:
    """The summary's line for what one variant serves."""
    return {"precision": s.precision, "file": file, "source_onnx": str(s.path), "sha256": atomic.file_digest(s.path)[0], "reason": s.reason}


@dataclass
class _VariantConfigs:
    """Writes each variant's config of the ONNX Runtime model into ``model_dir/configs``; keeps what it rendered, the
    notes on what it derived, and the warmup sample row (shared by variants that batch alike)."""

    cfg: PipelineConfig
    model_dir: Path
    serving: TargetConfig
    rendered: dict[str, str] = field(default_factory=dict)
    derived: dict[str, str] = field(default_factory=dict)
    rows: dict[bool, warmup_mod.Feed] = field(default_factory=dict)  # the warmup sample row, per "the config has a batch axis"
    variants: dict[str, VariantConfig] = field(default_factory=dict)  # each variant as rendered (a fixed-batch graph's changed)

    def write(self, key: str, served: Served, file_name: str, io: GraphIO) -> None:
        """Render and write variant ``key``, serving ``file_name`` (``served``) with the graph's inputs and outputs ``io``."""
        v_in, v_out = io
        variant, note = fixed_batch_variant(getattr(self.cfg.variants, key), v_in)
        self.variants[key] = variant
        pb = triton_config.onnx_model_config(self.cfg.model.name, v_in, v_out, variant, self.serving, f"variants.{key}")
        pb.default_model_filename = file_name
        lines = triton_config.describe_variant(variant, self.serving, served.precision)
        lines.insert(1, f"Serves {served.precision} ({pb.default_model_filename}): {served.reason}.")
        batched = variant.max_batch_size > 0
        if variant.warmup is not None:
            if batched not in self.rows:
                self.rows[batched] = warmup_mod.sample_row(self.cfg.model, v_in, batched)
                warmup_mod.write_files(self.model_dir, self.rows[batched], batched)
            warmup_mod.add_warmup(pb, variant.warmup, self.rows[batched], {i.name: i.data_type for i in pb.input})
        lines.append(warmup_mod.describe(variant.warmup, self.rows.get(batched) if variant.warmup else None, batched))
        if note:
            self.derived[key] = note
            lines.insert(1, f"Derived: {note}.")
        self.rendered[key] = triton_config.render(pb, lines)
        (self.model_dir / "configs" / f"{key}.pbtxt").write_text(self.rendered[key], encoding="utf-8")


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """What was shipped (dvc metrics); each variant's precision is the choose stage's metric."""
    engines = summary["engines"] or {}
    return {"version": summary["version"], "precision": summary["precision"], "engines_shipped": len(engines.get("included") or {})}


class CandidateWriter:
    """Throughput-variant candidates rendered exactly as the repository renders the throughput variant (the tune stage
    measures these; the repository then ships the winner through the same code), each a model of its own named after
    the candidate, serving the throughput variant's file (linked, not copied)."""

    def __init__(self, cfg: PipelineConfig, onnx: Path | dict[str, Served], parity: Path | None) -> None:
        """Raises RepositoryError when the file did not pass ``parity``, and OnnxModelError when it does not load."""
        self.cfg = cfg
        self.serving = TargetConfig(name=cfg.serving.target, kind=cfg.serving.kind, precision=cfg.serving.precision)
        self.shipped = _Shipped.of(cfg, onnx, parity)
        self.served = self.shipped.served["throughput"]

    def write(self, repo: Path, candidates: dict[str, VariantConfig]) -> dict[str, str]:
        """``repo/<candidate>/`` for each candidate (config.pbtxt, the version directory, warmup files); returns
        candidate -> model name (the same)."""
        s = self.served
        name = self.shipped.names[s.precision]
        for cand, variant in candidates.items():
            model_dir = repo / cand
            (model_dir / "configs").mkdir(parents=True)
            (model_dir / str(self.cfg.repository.version)).mkdir()
            (model_dir / str(self.cfg.repository.version) / name).symlink_to(Path(s.path).resolve())
            model = dataclasses.replace(self.cfg.model, name=cand)
            cfg = dataclasses.replace(self.cfg, model=model, variants=dataclasses.replace(self.cfg.variants, throughput=variant))
            _VariantConfigs(cfg, model_dir, self.serving).write("throughput", s, name, self.shipped.io[s.precision])
            (model_dir / "configs" / "throughput.pbtxt").rename(model_dir / "config.pbtxt")
            (model_dir / "configs").rmdir()
        return {c: c for c in candidates}
