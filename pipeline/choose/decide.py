"""choose stage: which precision the ONNX Runtime model serves, per variant, and why.

A configured precision (``target_specs.<targets[0]>.precision`` = fp32, fp16 or int8) is recorded as it is, with no
timing. ``auto`` takes every candidate (``choose.candidates``) that passed parity, times them in process in paired
rounds with each variant's served settings (pipeline/choose/timing.py), and per variant ships the fastest candidate
whose whole 90% interval says it is faster than the reference (fp32; the first candidate): the latency variant by
batch-1 p50, the throughput variant by best-batch inferences/s. A candidate whose interval reaches 1.0 is not shown
to be faster, so the reference, the most exact, keeps the variant; so does one whose rounds were too contended to
trust (timing.py). The variants may therefore serve different files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipeline.stats.estimate import Estimate
from pipeline.stats.ort import OrtSettings
from pipeline.choose import timing as timing_mod
from pipeline.core import atomic, host
from pipeline.records.choice import CandidateFile, PrecisionChoice, VariantChoice
from pipeline.records.parity import ParityReport, read_report
from pipeline.core.config import PipelineConfig, Precision, VariantConfig
from pipeline.core.errors import ConfigError
from pipeline.core.samples import input_specs, load_samples, request_rows, uniform_rows
from pipeline.core.specs import graph_io
from pipeline.core import onnx_tools

VARIANT_METRIC = {"latency": "batch-1 p50", "throughput": "best-batch inferences/s"}


def settings(v: VariantConfig) -> OrtSettings:
    """The ONNX Runtime settings a variant's config gives the served model."""
    return OrtSettings(v.intra_op_threads, v.inter_op_threads, v.graph_optimization_level)


def eligible(cfg: PipelineConfig, files: Mapping[str, Path | None], parity: ParityReport) -> tuple[dict[str, Path], dict[str, str]]:
    """(candidates that may ship, in choose.candidates order; {left-out candidate: why})."""
    ok: dict[str, Path] = {}
    out: dict[str, str] = {}
    for c in map(str, cfg.choose.candidates):
        path = files.get(c)
        passed, why = parity.verdict(c)
        if path is None:
            out[c] = f"no {c} ONNX given (--{c})"
        elif c == "int8" and cfg.model.data is None:
            out[c] = "calibrated on synthetic samples (model.data is null): not a model to ship"
        elif not passed:
            out[c] = f"did not pass parity: {why}"
        else:
            ok[c] = path
    return ok, out


def rows_for(cfg: PipelineConfig, onnx: Path) -> list[dict]:
    """The model's samples as batch-1 requests in the graph's dtypes, shaped as the bench sends them."""
    graph_in, _ = graph_io(onnx_tools.load_model(onnx, "FP32 model"))
    dtypes = {s.name: s.dtype for s in graph_in}
    samples = [{k: v for k, v in f.items() if k in dtypes} for f in load_samples(cfg.model, input_specs(cfg.model, graph_in))]
    rows = request_rows(samples, batched=True)
    rows = uniform_rows(rows) if cfg.bench.input_shapes == "uniform" else rows
    return [{k: v.astype(dtypes[k]) for k, v in r.items()} for r in rows]


def pick(timing: timing_mod.Timing, variant: str) -> tuple[str, str]:
    """(precision, reason) for one variant from the timed rounds."""
    ref = timing.reference
    speed = {c: timing.latency_speedup(c) if variant == "latency" else timing.throughput_speedup(c) for c in timing.candidates if c != ref}
    shown = {c: e for c, e in speed.items() if not e.untrusted and e.has_interval and e.low is not None and e.low > 1.0}
    metric = VARIANT_METRIC[variant]
    table = "; ".join(f"{c} {e.text()}" for c, e in speed.items())
    if not shown:
        if any(e.untrusted for e in speed.values()):
            return ref, (
                f"auto: the timing cannot be trusted, so {ref} keeps the variant ({table} over {ref}); "
                "rerun `dvc repro -f choose` when the machine is quieter, or configure the precision"
            )
        return ref, f"auto: no candidate shown faster than {ref} by {metric} ({table} over {ref})"
    best = max(shown, key=lambda c: shown[c].value or 0.0)
    return best, f"auto: fastest by {metric}, {shown[best].text()} over {ref}" + (f" (all: {table})" if len(speed) > 1 else "")


def choose(cfg: PipelineConfig, files: Mapping[str, Path | None], parity_path: Path, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Decide what each variant serves; return the report (its ``schema``/``target``/``variants``/``files`` part is the
    :class:`~pipeline.records.choice.PrecisionChoice` the repository reads).

    Raises ConfigError when no candidate may ship under ``auto``; ParityError when the parity report is unreadable.
    """
    t0 = time.perf_counter()
    target, configured = cfg.serving.target, str(cfg.serving.precision)
    given = {p: CandidateFile(str(f), atomic.file_digest(f)[0]) for p, f in files.items() if f is not None and f.is_file()}
    base: dict[str, Any] = {"machine": {"cpu": host.cpu_model(), "cores": host.cores_available()}}
    if configured != Precision.auto:
        why = f"configured: target_specs.{target}.precision={configured}"
        choice = PrecisionChoice(target, configured, {v: VariantChoice(configured, why) for v in ("latency", "throughput")}, given)
        return {**choice.to_json(), **base, "timing": None, "left_out": {}, "seconds": round(time.perf_counter() - t0, 2)}
    ok, left_out = eligible(cfg, files, read_report(parity_path))
    if not ok:
        raise ConfigError(
            f"precision auto for target '{target}': no candidate may ship",
            details=left_out,
            fix="fix a candidate (the reasons above), or set target_specs.<target>.precision to one that passes",
        )
    if len(ok) == 1:
        (only,) = ok
        why = f"auto: the only candidate that may ship ({'; '.join(f'{c}: {w}' for c, w in left_out.items())})"
        choice = PrecisionChoice(target, configured, {v: VariantChoice(only, why) for v in ("latency", "throughput")}, given)
        return {**choice.to_json(), **base, "timing": None, "left_out": left_out, "seconds": round(time.perf_counter() - t0, 2)}
    v = cfg.variants
    rows = rows_for(cfg, next(iter(ok.values())))
    timing = timing_mod.measure(ok, rows, settings(v.latency), settings(v.throughput), v.throughput.max_batch_size, cfg.choose, lambda s: progress(f"[choose] {s}"))
    picks = {variant: pick(timing, variant) for variant in ("latency", "throughput")}
    choice = PrecisionChoice(target, configured, {k: VariantChoice(p, why) for k, (p, why) in picks.items()}, given)
    return {
        **choice.to_json(),
        **base,
        "timing": timing.to_json(),
        "left_out": left_out,
        "rows": len(rows),
        "settings": {"latency": vars(settings(v.latency)), "throughput": vars(settings(v.throughput))},
        "seconds": round(time.perf_counter() - t0, 2),
    }


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """What each variant serves and, under auto, each candidate's speedups with their intervals (dvc metrics)."""
    out: dict[str, Any] = {f"{v}_precision": c["precision"] for v, c in report["variants"].items()}
    t = report.get("timing")
    for c, d in (t or {}).get("candidates", {}).items():
        out[f"{c}_p50_ms"], out[f"{c}_best_batch_infer_s"] = round(d["p50_ms"], 3), round(d["best_batch_infer_s"], 1)
        for k in ("latency_speedup", "throughput_speedup"):
            if k in d:
                out |= Estimate.from_json(d[k]).flat(f"{c}_{k}")
    return out
