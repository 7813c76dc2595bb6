"""Overload and bursts on the throughput variant: open-loop load at shares of its measured capacity.

perf_analyzer's request-rate mode sends at a fixed rate whatever comes back, so past capacity the queue grows
(unbounded) or the server turns requests away (``max_queue_size``). Each level's Triton /metrics deltas count
successes and failures by reason; the server's RSS is sampled all along. perf_analyzer stops at the first failed
request, so the bounded-queue check (the variant's config with a ``max_queue_size``) runs the open-loop client,
which keeps sending through rejections and times them.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.bench.measure import tritonmetrics as tm
from pipeline.bench.readiness.results import LoadLevel, Overload
from pipeline.bench.measure.servers import EmbeddedMode, Target
from pipeline.bench.measure.sweep import Sweeper
from pipeline.core.atomic import write_text
from pipeline.core.config import BenchConfig
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.embedded import read_config, write_config
from pipeline.serving.loadgen import Feed, open_loop

_DRAIN_S = 30.0  # a backlog left by a level past capacity must be served before the next level starts


def drain(t: Target, limit_s: float = _DRAIN_S) -> None:
    """Wait until the model has no pending request (or ``limit_s`` passed, or /metrics is off)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        now = tm.scrape(t.metrics_url, t.model)
        if not now or not now.get("pending"):
            return
        time.sleep(0.2)


def _observe(lvl: LoadLevel, t: Target, before: dict | None, t0: float, t1: float) -> LoadLevel:
    """Triton's counts (deltas over the run, including what a backlog served after it) and the RSS window."""
    d = tm.delta(before, tm.scrape(t.metrics_url, t.model))
    lvl.success, lvl.failed, lvl.rejected = d.get("success", 0.0), d.get("failed", 0.0), d.get("failed_rejected", 0.0)
    lvl.pending_after = d.get("pending")
    if t.memory is not None:
        w, series = t.memory.window(t0, t1), t.memory.series(t0, t1)
        lvl.rss_peak_mb = w.peak_mb if w else None
        lvl.rss_start_mb, lvl.rss_end_mb = (series[0][1], series[-1][1]) if series else (None, None)
    return lvl


def perf_level(sw: Sweeper, t: Target, label: str, share: float, rate: float, queue_size: int, intervals: Path | None = None, interval_ms: int | None = None) -> LoadLevel:
    """One perf_analyzer run in request-rate mode (or on a schedule of gaps), three windows, no stability demand."""
    b = sw.bench
    tag = label.replace("%", "pct").replace(" ", "_")
    csv_path = sw.work_dir / f"overload_{tag}.csv"
    opts = pa_mod.PerfOptions(
        request_rate=None if intervals else rate,
        request_intervals=intervals,
        protocol=b.protocol,
        measurement_interval_ms=interval_ms or b.overload.interval_ms,
        stability_percentage=1000,  # past capacity nothing is stable: report what happened
        max_trials=3,
        shapes=sw.shapes,
    )
    cmd = pa_mod.build_command(sw.pa, t.model, t.perf_url, sw.input_json, csv_path, opts)
    before, t0 = tm.scrape(t.metrics_url, t.model), time.monotonic()
    # Three windows; one that cannot end (a schedule the client cannot keep) must not hold the bench for perf_timeout_s.
    run = pa_mod.run(sw.pa, cmd, 1, csv_path, timeout_s=min(b.perf_timeout_s, 30 * (interval_ms or b.overload.interval_ms) / 1000 + 30))
    t1 = time.monotonic()
    drain(t)
    (sw.work_dir / f"overload_{tag}.log").write_text(" ".join(cmd) + "\n\n" + run.log)
    row = run.row
    lvl = LoadLevel(
        label,
        share,
        round(rate, 1),
        "perf_analyzer",
        queue_size,
        run.valid,
        run.reason(),
        round(t1 - t0, 2),
        row.get("throughput_infer_s"),
        row.get("p50_ms"),
        row.get("p99_ms"),
        passes_ms=[round(ms, 3) for _, ms in pa_mod.parse_passes(run.log)],
    )
    lvl = _observe(lvl, t, before, t0, t1)
    sw.log(
        f"[bench] overload {label} ({rate:.0f}/s offered): "
        + (f"{lvl.achieved_rate:.0f}/s, p99 {lvl.p99_ms:.1f} ms" if run.valid else f"INVALID ({lvl.reason[-120:]})")
        + f"; failed {lvl.failed:.0f} (rejected {lvl.rejected:.0f})"
    )
    return lvl


MAX_BURST_RATE = 5000.0  # requests/s a client on this kind of machine can schedule: a tiny model's 4x capacity is not


def burst_intervals(path: Path, capacity: float, factor: float, burst_s: float) -> tuple[Path, float, float]:
    """perf_analyzer's --request-intervals file: idle (2 requests 0.5 s apart), ``factor`` x capacity (at most
    MAX_BURST_RATE) for ``burst_s``, idle again. Returns the file, the pattern's length in seconds (one measurement
    window) and the burst's rate."""
    rate = min(factor * capacity, MAX_BURST_RATE)
    gaps = [500_000, 500_000] + [round(1e6 / rate)] * max(1, round(burst_s * rate)) + [500_000]
    write_text(path, "\n".join(str(g) for g in gaps) + "\n")
    return path, sum(gaps) / 1e6, rate


def bounded_check(mode: EmbeddedMode, t: Target, rows: list[Feed], share: float, capacity: float, b: BenchConfig, log: Callable[[str], None], seconds: float = 3.0) -> LoadLevel:
    """The throughput config with a bounded queue at ``share`` of capacity, by the open-loop client (counts rejections)."""
    cfg = read_config(mode.repo / t.model / "config.pbtxt")
    queue = cfg.dynamic_batching.default_queue_policy.max_queue_size
    model = t.model
    if not queue:  # it ships unbounded: measure the same config with bench.overload.queue_size
        queue, model = b.overload.queue_size, f"{t.model}_bounded"
        dest = mode.repo / model
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(mode.repo / t.model, dest)
        cfg.name = model
        cfg.dynamic_batching.default_queue_policy.max_queue_size = queue
        write_config(dest / "config.pbtxt", cfg)
        with t.client() as c:
            c.load(model)
    bt = Target(t.http_url, t.perf_url, model, t.variant, t.version, t.metrics_url, t.protocol, memory=t.memory, grpc_url=t.grpc_url)
    rate = share * capacity
    before, t0 = tm.scrape(bt.metrics_url, model), time.monotonic()
    # At most 3000 requests: a Python client cannot offer a tiny model's thousands per second for long (the report
    # gives the rate it achieved).
    run = open_loop(bt.grpc_url, model, rows, [1.0 / rate] * max(1, min(3000, round(rate * seconds))))
    t1 = time.monotonic()
    drain(bt)
    ok, rej = sorted(run.ok_ms), sorted(run.rejected_ms)

    def pct(xs: list[float], q: float) -> float | None:
        return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None

    lvl = LoadLevel(
        f"{share:.0%} bounded",
        share,
        round(rate, 1),
        "open-loop client (gRPC)",
        queue,
        run.unanswered == 0 and not run.errors,
        run.error_sample or (f"{run.unanswered} requests unanswered" if run.unanswered else ""),
        round(t1 - t0, 2),
        round(run.achieved_rate, 1) if run.achieved_rate else None,
        pct(ok, 0.5),
        pct(ok, 0.99),
        timeouts=run.timeouts + run.unanswered,
        rejected_p99_ms=pct(rej, 0.99),
    )
    lvl = _observe(lvl, bt, before, t0, t1)
    # Triton's nv_inference_request_failure does not count what a full queue turns away: the client's count is the one.
    lvl.rejected, lvl.failed = float(len(rej)), lvl.failed + len(rej) + run.errors
    mode_note = "" if model == t.model else f" (shipped unbounded: max_queue_size {queue} for this check)"
    log(
        f"[bench] bounded queue{mode_note} at {rate:.0f}/s offered ({run.sent} sent in {run.seconds:.1f} s): {len(ok)} ok, p99 "
        f"{lvl.p99_ms} ms; {len(rej)} rejected (p99 {lvl.rejected_p99_ms} ms), {lvl.timeouts:.0f} timed out"
    )
    if model != t.model:
        with t.client() as c:
            c.unload(model)
    return lvl


def overload(mode: EmbeddedMode, sw: Sweeper, t: Target, rows: list[Feed], capacity: float, capacity_from: str) -> Overload:
    """Every bench.overload.levels share by perf_analyzer, the burst, then the bounded-queue check at the top share."""
    b = sw.bench
    queue = read_config(mode.repo / t.model / "config.pbtxt").dynamic_batching.default_queue_policy.max_queue_size
    out = Overload(round(capacity, 1), capacity_from)
    for share in b.overload.levels:
        out.levels.append(perf_level(sw, t, f"{share:.0%}", share, share * capacity, queue))
    path, period, rate = burst_intervals(sw.work_dir / "burst_intervals.txt", capacity, b.overload.burst_factor, b.overload.burst_s)
    out.levels.append(perf_level(sw, t, "burst", rate / capacity, rate, queue, path, round(period * 1000)))
    out.levels.append(bounded_check(mode, t, rows, max(b.overload.levels), capacity, b, sw.log))
    return out
