"""Tune the throughput variant by measurement, like Model Analyzer but into the named variant.

Each candidate (max queue delay x preferred batch sizes x instance count) is served and
measured at ``bench.tune_concurrency``, between two timings of in-process ONNX Runtime at
the baseline's best batch size (the gauge). Candidates are measured minutes apart on a
machine whose speed drifts by tens of percent, so raw infer/s would rank the machine's
moods: the rank is infer/s over the gauge of the same minute, and a candidate counts
only when its two gauges agree within ``bench.paired_max_drift`` (it is measured again,
up to ``bench.tune_max_rounds`` times, until they do). The best counted candidate whose p99
fits ``bench.latency_budget_ms`` wins. The result is a full ``throughput.pbtxt`` written
as a bench output, plus the Hydra overrides that make the repository stage emit it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.serving import perf_analyzer as pa_mod
from pipeline.bench.measure import bracketed_rounds, sweep
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


def tune(
    mode,  # noqa: ANN001 - EmbeddedMode
    pa: pa_mod.PerfAnalyzer,
    bench: BenchConfig,
    input_json: Path,
    shapes: dict,
    work_dir: Path,
    gauge: Callable[[], float],
) -> tuple[dict, mc.ModelConfig | None]:
    """Measure every candidate; return the sweep record and the chosen embedded config (or None).

    ``gauge()`` is in-process ONNX Runtime infer/s at the baseline's best batch size.
    """
    base = mode.embedded_config("throughput")
    record: dict = {"concurrency": bench.tune_concurrency, "latency_budget_ms": bench.latency_budget_ms,
                    "max_drift": bench.paired_max_drift, "rank": "infer/s over in-process best-batch infer/s", "candidates": []}  # fmt: skip
    cands = candidates(bench, base.max_batch_size)
    for k, cand in enumerate(cands):
        name = f"tune{k}"
        mode.add_variant(name, apply(base, cand))
        with mode.serve(name) as t:

            def steps(i: int, t=t, name=name) -> list[Callable[[], dict]]:  # noqa: ANN001 - Target
                return [lambda: {"point": sweep(pa, bench, t.model, t.http_url, t.perf_url, input_json, shapes,
                                                [bench.tune_concurrency], work_dir, f"{name}_r{i}")[0]}]  # fmt: skip

            def ratio(d: dict, gauge_mean: float) -> float | None:
                return d["point"].metrics["throughput_infer_s"] / gauge_mean if d["point"].valid else None

            s = bracketed_rounds(steps, ratio, gauge, "ort_best_infer_s", 1, bench.tune_max_rounds, bench.paired_max_drift)
        last = s["rounds"][-1]  # the counted one when one counted: rounds stop there
        p = last["point"]
        row = dict(cand, valid=p.valid, reason=p.reason, avg_batch=p.avg_batch, rounds=len(s["rounds"]),
                   gauges=[round(g, 1) for g in last["gauges"]], drift=last["drift"], steady=last["counted"], vs_ort_best=last["ratio"])  # fmt: skip
        if p.valid:
            row.update(p99_ms=p.metrics["p99_ms"], p50_ms=p.metrics["p50_ms"], throughput_infer_s=p.metrics["throughput_infer_s"])
        row["within_budget"] = bool(p.valid and p.metrics["p99_ms"] <= bench.latency_budget_ms)
        record["candidates"].append(row)
    order = ranked(record["candidates"])
    if not order:
        record["chosen"] = None
        record["persist"] = ("no candidate met the p99 budget with steady gauges: raise bench.latency_budget_ms, widen the "
                             "tune_* lists, or on a drifting machine raise bench.tune_max_rounds / bench.paired_max_drift")  # fmt: skip
        return record, None
    cand = cands[order[0]]
    record["chosen"] = cand
    # How far ahead of the runner-up: a lead of a few percent is inside what one measurement per candidate can tell.
    shares = [record["candidates"][i]["vs_ort_best"] for i in order[:2]]
    record["lead_over_next"] = shares[0] / shares[1] - 1 if len(shares) == 2 else None
    record["persist"] = (
        f"dvc exp run -S 'variants.throughput.dynamic_batching.max_queue_delay_us={cand['max_queue_delay_us']}' "
        f"-S 'variants.throughput.dynamic_batching.preferred_batch_sizes={cand['preferred_batch_sizes']}' "
        f"-S 'variants.throughput.instance_count={cand['instance_count']}'"
    )
    return record, apply(base, cand)


def ranked(rows: list[dict]) -> list[int]:
    """Indices of the candidates that may win (within the p99 budget, steady gauges), best share of in-process first."""
    ok = [i for i, r in enumerate(rows) if r["within_budget"] and r["steady"]]
    return sorted(ok, key=lambda i: rows[i]["vs_ort_best"], reverse=True)


def choose(rows: list[dict]) -> int | None:
    """Index of the winner, or None when no candidate may win."""
    order = ranked(rows)
    return order[0] if order else None


def shipped_form(shipped_cfg: mc.ModelConfig, cand: dict) -> mc.ModelConfig:
    """The shipped (onnxruntime) throughput config with the chosen values: what gets written."""
    return apply(shipped_cfg, cand)
