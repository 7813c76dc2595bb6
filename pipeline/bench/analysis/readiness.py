"""Diagnosis rules for production readiness (one function per rule; :func:`readiness_findings` runs them in report order)."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench.results import BenchResult, Finding

# The top load level past capacity grows the queue without limit when the latency of its last window is this many
# times the first's (three windows of bench.overload.interval_ms), or requests are still pending after it.
GROWTH_LIMIT = 2.0
# A bounded queue past capacity should still serve about its capacity; under this share of it, the queue starves the model.
STARVED = 0.5


def slow_first_request(res: BenchResult) -> list[Finding]:
    """The first request after a load slower than bench.readiness.first_request_max_ratio x the warm p50 (the config as shipped)."""
    prod, limit, out = res.production, res.settings.readiness.first_request_max_ratio, []
    for c in prod.cold_start if prod else []:
        # The shipped setting: with warmup when the variant has one (its no-warmup run shows what warmup buys).
        if c.error or c.first_vs_warm is None or (not c.warmup and prod and prod.cold(c.variant, True)) or c.first_vs_warm <= limit:
            continue
        without = prod.cold(c.variant, False) if prod and c.warmup else None
        bought = f"; without warmup it was {without.first_ms:.1f} ms" if without and without.first_ms else ""
        out.append(
            Finding(
                "slow_first_request",
                "warning",
                c.variant,
                f"the first request after the load took {c.first_ms:.1f} ms, {c.first_vs_warm:.1f}x the warm p50 of "
                f"{c.warm_p50_ms:.2f} ms (limit {limit:g}x, bench.readiness.first_request_max_ratio){bought}",
                f"warm up more batch sizes or iterations (variants.{c.variant}.warmup)"
                if c.warmup
                else f"add a model_warmup: variants.{c.variant}.warmup={{batch_sizes: [1], count: 1}}",
            )
        )
    return out


def memory_growth(res: BenchResult) -> Finding | None:
    """The soak's RSS slope: its 90% interval's lower end above bench.soak.memory_growth_mb_per_h (so noise alone cannot fire it)."""
    soak = res.production.soak if res.production else None
    e = soak.slope_mb_per_h if soak else None
    limit = res.settings.soak.memory_growth_mb_per_h
    if soak is None or e is None or e.value is None or e.low is None or e.low <= limit:
        return None
    part = f" (partial: {soak.reason})" if soak.partial else ""
    return Finding(
        "memory_growth",
        "warning",
        soak.variant,
        f"RSS grew {e.value:.1f} MB/h (90% CI {e.low:.1f}-{e.high:.1f}) over a {soak.seconds:.0f} s soak at c={soak.concurrency} "
        f"after the first {soak.ramp_s:.0f} s, {soak.rss_start_mb or 0:.1f} -> {soak.rss_end_mb or 0:.1f} MB{part}; limit {limit:g} MB/h "
        "(bench.soak.memory_growth_mb_per_h)",
        "look for a leak under dynamic batching: per-batch-shape allocations (ORT arena, session per shape), growing caches; "
        "rerun a longer soak (bench.soak.duration_s) to confirm",
    )


def metrics_disagree(res: BenchResult) -> Finding | None:
    """Triton's /metrics and perf_analyzer's server split (or the statistics API's batch) apart by more than bench.readiness.metrics_tolerance."""
    tol, worst = res.settings.readiness.metrics_tolerance, []
    for v in dict.fromkeys([*res.variants, "latency", "throughput"]):
        for p in res.points_of(v):
            worst += [(share, key, v, p) for key, share in p.agree.items() if share > tol]
    if not worst:
        return None
    share, key, v, p = max(worst, key=lambda w: w[0])
    t = p.triton
    ours = {
        "server_ms": sum(t.get(k, 0.0) for k in ("queue_ms", "compute_input_ms", "compute_infer_ms", "compute_output_ms")),
        "queue_ms": t.get("queue_ms"),
        "compute_infer_ms": t.get("compute_infer_ms"),
        "avg_batch": t.get("avg_batch"),
    }[key]
    theirs = {
        "server_ms": p.metrics.get("server_ms"),
        "queue_ms": p.metrics.get("server_queue_ms"),
        "compute_infer_ms": p.metrics.get("server_compute_infer_ms"),
        "avg_batch": p.avg_batch,
    }[key]
    what = {"server_ms": "server time (ms)", "queue_ms": "queue (ms)", "compute_infer_ms": "compute infer (ms)", "avg_batch": "average batch"}[key]
    return Finding(
        "metrics_disagree",
        "warning",
        v,
        f"{len(worst)} measurement(s) where Triton's /metrics and perf_analyzer disagree by more than {tol:.0%}; worst: "
        f"{what} at c={p.concurrency} apart by {share:.0%} (/metrics {ours:.3g}, perf_analyzer / statistics API {theirs:.3g})",
        "the two count the same requests over one run: check that nothing else sends to this model during the bench, "
        "and a quieter machine (perf_analyzer reports its last windows, /metrics the whole run)",
    )


def unbounded_queue(res: BenchResult, configs: dict[str, mc.ModelConfig]) -> Finding | None:
    """No max_queue_size on the throughput variant, and past capacity its latency or memory grew without a bound."""
    cfg, over = configs.get("throughput"), res.production.overload if res.production else None
    if cfg is None or over is None or cfg.dynamic_batching.default_queue_policy.max_queue_size:
        return None
    past = [x for x in over.levels if x.tool == "perf_analyzer" and x.share > 1 and x.label != "burst"]
    grew = [x for x in past if (x.latency_growth or 0) > GROWTH_LIMIT or (x.pending_after or 0) > 0]
    if not grew:
        return None
    x = grew[-1]
    mem = f"; RSS {x.rss_start_mb:.0f} -> {x.rss_end_mb:.0f} MB" if x.rss_start_mb is not None and x.rss_end_mb is not None else ""
    return Finding(
        "unbounded_queue",
        "warning",
        "throughput",
        f"max_queue_size is 0 (unbounded): at {x.label} of capacity ({x.offered_rate:.0f}/s offered) the average latency went "
        f"{' -> '.join(f'{ms:.0f}' for ms in x.passes_ms)} ms window after window{mem}; a queue past capacity only grows",
        "bound it: variants.throughput.dynamic_batching.max_queue_size (the bounded-queue check shows the rejections it gives)",
    )


def rejections_not_clean(res: BenchResult) -> Finding | None:
    """The bounded-queue check: requests beyond the queue must come back rejected, fast, never as timeouts."""
    over = res.production.overload if res.production else None
    x = next((x for x in over.levels if x.tool.startswith("open-loop")), None) if over else None
    if x is None:
        return None
    if x.timeouts or not x.valid:
        return Finding(
            "rejections_not_clean",
            "warning",
            "throughput",
            f"bounded queue (max_queue_size {x.queue_size}) at {x.offered_rate:.0f}/s: {x.timeouts:.0f} timed out or unanswered, "
            f"{x.rejected:.0f} rejected{'; ' + x.reason if x.reason else ''}",
            "a full queue must reject at once: check the server log; lower max_queue_size or the client timeout",
        )
    ok_rate = x.achieved_rate  # successes per second of sending
    if x.rejected and ok_rate is not None and over is not None and ok_rate < STARVED * over.capacity_infer_s:
        # Rejections alone are clean; a queue that turns work away while the model idles is not.
        return Finding(
            "rejections_not_clean",
            "warning",
            "throughput",
            f"bounded queue (max_queue_size {x.queue_size}) at {x.offered_rate:.0f}/s offered: {x.rejected:.0f} rejected (p99 "
            f"{x.rejected_p99_ms} ms), but only {ok_rate:.0f} requests/s served of a {over.capacity_infer_s:.0f}/s capacity, "
            f"p99 {x.p99_ms} ms: the scheduler starved the model while turning requests away",
            "keep max_queue_size 0 on this Triton build and bound the load before the server (a client-side limit or a "
            "proxy), or measure a newer Triton; see docs/benchmarking.md (bounded queues)",
        )
    if not x.rejected:
        return Finding(
            "rejections_not_clean",
            "info",
            "throughput",
            f"bounded queue (max_queue_size {x.queue_size}) at {x.offered_rate:.0f}/s offered: no request was rejected (achieved {x.achieved_rate} ok/s): the queue never filled",
            "offer more load (bench.overload.levels) to see rejections",
        )
    return None


def readiness_findings(res: BenchResult, configs: dict[str, mc.ModelConfig]) -> list[Finding]:
    out: list[Finding | None] = [*slow_first_request(res), memory_growth(res), metrics_disagree(res), unbounded_queue(res, configs), rejections_not_clean(res)]
    return [f for f in out if f is not None]
