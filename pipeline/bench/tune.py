"""Tune the throughput variant by measurement, like Model Analyzer but into the named variant.

Each candidate (max queue delay x preferred batch sizes x instance count) is served and
measured at ``bench.tune_concurrency``; the best throughput whose p99 fits
``bench.latency_budget_ms`` wins. The result is a full ``throughput.pbtxt`` written as
a bench output, plus the Hydra overrides that make the repository stage emit it.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.adapters import perf_analyzer as pa_mod
from pipeline.bench.measure import sweep
from pipeline.core.config import BenchConfig


def candidates(bench: BenchConfig, max_batch_size: int) -> list[dict]:
    """Every scheduling combination to try; preferred sizes above max_batch_size are dropped."""
    out = []
    for delay, pref, inst in itertools.product(bench.tune_queue_delays_us, bench.tune_preferred_batch_sizes, bench.tune_instance_counts):
        pref = [b for b in pref if 0 < b <= max_batch_size]
        if pref:
            out.append({"max_queue_delay_us": int(delay), "preferred_batch_sizes": pref, "instance_count": int(inst)})
    return out


def apply(cfg: mc.ModelConfig, cand: dict) -> mc.ModelConfig:
    """A copy of ``cfg`` with the candidate's scheduling values."""
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    out.dynamic_batching.ClearField("preferred_batch_size")
    out.dynamic_batching.preferred_batch_size.extend(cand["preferred_batch_sizes"])
    out.dynamic_batching.max_queue_delay_microseconds = cand["max_queue_delay_us"]
    if not out.instance_group:
        out.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
    out.instance_group[0].count = cand["instance_count"]
    return out


def tune(mode, pa: pa_mod.PerfAnalyzer, bench: BenchConfig, input_json: Path, shapes: dict, work_dir: Path) -> tuple[dict, mc.ModelConfig | None]:  # noqa: ANN001 - EmbeddedMode
    """Measure every candidate; return the sweep record and the chosen embedded config (or None)."""
    base = mode.embedded_config("throughput")
    record: dict = {"concurrency": bench.tune_concurrency, "latency_budget_ms": bench.latency_budget_ms, "candidates": []}
    best: tuple[float, dict, mc.ModelConfig] | None = None
    for k, cand in enumerate(candidates(bench, base.max_batch_size)):
        name = f"tune{k}"
        cfg = apply(base, cand)
        mode.add_variant(name, cfg)
        with mode.serve(name) as t:
            (p,) = sweep(pa, bench, t.model, t.http_url, t.perf_url, input_json, shapes, [bench.tune_concurrency], work_dir, name)
        row = dict(cand, valid=p.valid, reason=p.reason, avg_batch=p.avg_batch)
        if p.valid:
            row.update(p99_ms=p.metrics["p99_ms"], p50_ms=p.metrics["p50_ms"], throughput_infer_s=p.metrics["throughput_infer_s"])
        row["within_budget"] = bool(p.valid and p.metrics["p99_ms"] <= bench.latency_budget_ms)
        record["candidates"].append(row)
        if row["within_budget"] and (best is None or row["throughput_infer_s"] > best[0]):
            best = (row["throughput_infer_s"], cand, cfg)
    if best is None:
        record["chosen"] = None
        record["persist"] = "no candidate met the p99 budget: raise bench.latency_budget_ms or widen the tune_* lists"
        return record, None
    _, cand, cfg = best
    record["chosen"] = cand
    record["persist"] = (
        f"dvc exp run -S 'variant.throughput.dynamic_batching.max_queue_delay_us={cand['max_queue_delay_us']}' "
        f"-S 'variant.throughput.dynamic_batching.preferred_batch_sizes={cand['preferred_batch_sizes']}' "
        f"-S 'variant.throughput.instance_count={cand['instance_count']}'"
    )
    return record, cfg


def shipped_form(shipped_cfg: mc.ModelConfig, cand: dict) -> mc.ModelConfig:
    """The shipped (onnxruntime) throughput config with the chosen values: what gets written."""
    return apply(shipped_cfg, cand)
