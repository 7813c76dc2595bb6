"""Soak: sustained load on the throughput variant at its best concurrency, and the RSS slope it leaves.

A slow leak (the ONNX-under-dynamic-batching kind) shows as RSS climbing at a steady rate once the warmup ramp
(allocator arenas, first batches of each shape) is over. The slope is a Theil-Sen line (scipy.stats.theilslopes:
the median of pairwise slopes, robust to the spikes a batch allocation makes) through block medians of the RSS
samples after ``bench.soak.ramp_s``; block medians, not the raw samples, because neighbouring samples are not
independent and would make the interval look narrower than it is. The interval is theilslopes' 90% one.
A SIGINT or SIGTERM during the soak ends it early: what was sampled is kept, marked partial.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from pipeline.stats.estimate import CONFIDENCE, Estimate
from pipeline.bench.readiness.results import Soak, thin
from pipeline.bench.measure.servers import Target
from pipeline.bench.measure.sweep import Sweeper
from pipeline.serving import perf_analyzer as pa_mod

_BLOCKS = 20  # block medians the line is fitted through (at least 5 s each)


def rss_slope(series: list[tuple[float, float]], ramp_s: float) -> Estimate:
    """MB per hour after the first ``ramp_s`` seconds of ``series`` ((monotonic s, MB)), with its 90% interval."""
    from scipy.stats import theilslopes

    if len(series) < 4:
        return Estimate(None)
    t0 = series[0][0]
    kept = [(t - t0, mb) for t, mb in series if t - t0 >= ramp_s]
    if len(kept) < 4:
        return Estimate(None)
    span = kept[-1][0] - kept[0][0]
    block = max(5.0, span / _BLOCKS)
    edges = np.arange(kept[0][0], kept[-1][0] + block, block)
    ts, mbs = np.array([t for t, _ in kept]), np.array([mb for _, mb in kept])
    xs, ys = [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (ts >= lo) & (ts < hi)
        if sel.any():
            xs.append(float(np.median(ts[sel])))
            ys.append(float(np.median(mbs[sel])))
    if len(xs) < 3:
        return Estimate(None)
    res = theilslopes(ys, np.array(xs) / 3600.0, alpha=CONFIDENCE)
    slope, low, high = float(res.slope), float(res.low_slope), float(res.high_slope)
    return Estimate(round(slope, 2), round(min(low, slope), 2), round(max(high, slope), 2), len(xs))


def soak(sw: Sweeper, t: Target, concurrency: int, log: Callable[[str], None]) -> Soak:
    """perf_analyzer at ``concurrency`` for bench.soak.duration_s (three windows, no stability demand) while RSS is sampled."""
    b = sw.bench
    csv_path = sw.work_dir / f"soak_c{concurrency}.csv"
    opts = pa_mod.PerfOptions(
        concurrency, protocol=b.protocol, measurement_interval_ms=max(1000, round(b.soak.duration_s * 1000 / 3)), stability_percentage=1000, max_trials=3, shapes=sw.shapes
    )
    cmd = pa_mod.build_command(sw.pa, t.model, t.perf_url, sw.input_json, csv_path, opts)
    log(f"[bench] soak: {t.variant} at c={concurrency} for {b.soak.duration_s:.0f} s (RSS every {b.readiness.memory_sample_ms:.0f} ms)")
    t0, run, reason = time.monotonic(), None, ""
    try:
        run = pa_mod.run(sw.pa, cmd, concurrency, csv_path, timeout_s=opts.deadline_s(b.soak.duration_s + b.perf_timeout_s))
        (sw.work_dir / f"soak_c{concurrency}.log").write_text(" ".join(cmd) + "\n\n" + run.log)
        if run.returncode in (-2, 130):
            raise KeyboardInterrupt  # perf_analyzer took the same Ctrl-C (one process group) and ended first
        reason = "" if run.valid else run.reason()
    except KeyboardInterrupt:  # subprocess.run has killed perf_analyzer; the caller writes what was sampled, then stops
        run, reason = None, f"interrupted after {time.monotonic() - t0:.0f} s of {b.soak.duration_s:.0f} s"
    t1 = time.monotonic()
    series = t.memory.series(t0, t1) if t.memory else []
    ramp = min(b.soak.ramp_s, (t1 - t0) / 3)  # an interrupted soak keeps two thirds of what it has for the fit
    row = run.row if run is not None else {}
    out = Soak(
        t.variant,
        concurrency,
        b.soak.duration_s,
        round(t1 - t0, 1),
        run is None,
        round(ramp, 1),
        rss_slope(series, ramp),
        series[0][1] if series else None,
        series[-1][1] if series else None,
        row.get("throughput_infer_s"),
        row.get("p99_ms"),
        series=thin(series, t0),
        reason=reason,
    )
    e = out.slope_mb_per_h
    ci = f" (90% CI {e.low:.2f} to {e.high:.2f}, {e.n} block medians)" if e.has_interval else ""
    mb = [f"{v:.1f}" if v is not None else "?" for v in (out.rss_start_mb, out.rss_end_mb)]
    slope = f"{e.value:.2f}" if e.value is not None else "?"
    log(f"[bench] soak: RSS {mb[0]} -> {mb[1]} MB; slope {slope} MB/h{ci}" + (" (partial)" if out.partial else ""))
    return out
