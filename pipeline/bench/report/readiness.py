"""report.md's production-readiness sections and bench.png's memory and overload panels (rendering only)."""

from __future__ import annotations

from typing import Any

from pipeline.bench.report.rounds import _f
from pipeline.bench.results import BenchResult


def cold_start(res: BenchResult) -> list[str]:
    prod = res.production
    if prod is None or not prod.cold_start:
        return []
    lines = [
        "",
        "## Cold start (each variant in a fresh server, explicit model control)",
        "",
        "Server start: spawn to server ready with no model; load: the load request to model ready (warmup included); "
        f"first request against the p50 of the next {res.settings.readiness.cold_start_requests} requests, sent the same way (HTTP, "
        "one at a time, the same row; the connection opened first); Triton's statistics give the inferences it ran while loading "
        "(the warmup) and the requests' time inside the server. RSS after the load and its peak in that server.",
        "",
        "| variant | model_warmup | warmup inferences | server start s | load s | start to ready s | first request ms | warm p50 ms | first / warm "
        "| first in server ms | warm in server ms | RSS loaded MB | RSS peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in prod.cold_start:
        if c.error:
            lines.append(f"| {c.variant} | {'yes' if c.warmup else 'no'} | FAILED: {c.error} |" + " |" * 10)
            continue
        lines.append(
            f"| {c.variant} | {'yes' if c.warmup else 'no'} | {c.warmup_inferences:.0f} | {_f(c.server_start_s)} | {_f(c.load_s)} | "
            f"{_f(c.start_to_ready_s)} | {_f(c.first_ms)} | {_f(c.warm_p50_ms)} | {_f(c.first_vs_warm, unit='x')} | {_f(c.first_server_ms)} | "
            f"{_f(c.warm_server_ms)} | {_f(c.rss_loaded_mb, '.0f')} | {_f(c.rss_peak_mb, '.0f')} |"
        )
    return lines


def memory(res: BenchResult) -> list[str]:
    rows = []
    for v in res.variants:
        mems = [p.memory for p in res.points_of(v) if p.memory]
        if mems:
            medians = sorted(m["rss_median_mb"] for m in mems)
            rows.append(f"| {v} | {max(m['rss_peak_mb'] for m in mems):.0f} | {medians[len(medians) // 2]:.0f} | {len(mems)} |")
    if not rows:
        return []
    shared = " In the default profile both variants are served by one server, so its RSS is theirs together." if res.settings.profile == "default" else ""
    return [
        "",
        "## Memory (RSS of tritonserver and its stubs, psutil)",
        "",
        f"Sampled every {res.settings.readiness.memory_sample_ms:.0f} ms during every measured point; steady state is the median of the points' "
        f"median RSS.{shared} A variant alone: its cold start's RSS above.",
        "",
        "| variant | peak MB | steady MB | points |",
        "|---|---|---|---|",
        *rows,
    ]


def metrics(res: BenchResult) -> list[str]:
    prod = res.production
    pts = [p for p in res.all_points() if p.agree]
    lines = ["", "## Triton's own metrics (/metrics deltas) against perf_analyzer", ""]
    if prod and prod.metrics_limits:
        lines += ["What /metrics leaves out here: " + "; ".join(prod.metrics_limits) + ".", ""]
    if not pts:
        return lines + ["No measurement with /metrics deltas."]
    lines += [
        f"Per run, Triton's counters read before and after (the whole run) against perf_analyzer's server split (its last windows) "
        f"and the statistics API's batch; a share is |a - b| / max(a, b), 0 below {res.settings.queue.min_ms} ms. Tolerance "
        f"{res.settings.readiness.metrics_tolerance:.0%} (bench.readiness.metrics_tolerance).",
        "",
        "| | median share | worst share | runs |",
        "|---|---|---|---|",
    ]
    for key, what in (("server_ms", "server time"), ("queue_ms", "queue"), ("compute_infer_ms", "compute infer"), ("avg_batch", "average batch")):
        vals = sorted(p.agree[key] for p in pts if key in p.agree)
        if vals:
            lines.append(f"| {what} | {vals[len(vals) // 2]:.1%} | {vals[-1]:.1%} | {len(vals)} |")
    fails = sum(p.triton.get("failed", 0.0) for p in pts)
    return lines + ["", f"Requests Triton counted as failed over these runs: {fails:.0f}."]


def overload(res: BenchResult) -> list[str]:
    over = res.production.overload if res.production else None
    if over is None:
        return []
    lines = [
        "",
        "## Overload and bursts (throughput variant, open loop)",
        "",
        f"Capacity {over.capacity_infer_s:.1f} infer/s ({over.capacity_from}). perf_analyzer's request-rate mode at each share, and "
        f"one burst (idle, {res.settings.overload.burst_factor:g}x capacity for {res.settings.overload.burst_s:g} s, idle) by --request-intervals; "
        "perf_analyzer stops at the first failed request, so the bounded-queue check is the open-loop client, which keeps "
        "sending and counts rejections. Successes are Triton's count (/metrics); rejections the client's (Triton does not count "
        "what its full queue turns away); latency per window shows a queue that grows. The bounded check loads a copy of the "
        "variant into the same server, so its RSS starts one model higher.",
        "",
        "| load | offered /s | tool | max_queue_size | achieved /s | p50 ms | p99 ms | error rate | rejected | timeouts | rejection p99 ms "
        "| RSS MB start -> end (peak) | latency per window ms | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in over.levels:
        status = "ok" if x.valid else ("INVALID: " + x.reason[-80:].replace("|", "\\|"))
        lines.append(
            f"| {x.label} | {x.offered_rate:.0f} | {x.tool} | {x.queue_size or 'unbounded'} | {_f(x.achieved_rate, '.1f')} | {_f(x.p50_ms)} | "
            f"{_f(x.p99_ms)} | {_f(x.error_rate, '.1%')} | {x.rejected:.0f} | {x.timeouts:.0f} | {_f(x.rejected_p99_ms)} | "
            f"{_f(x.rss_start_mb, '.0f')} -> {_f(x.rss_end_mb, '.0f')} ({_f(x.rss_peak_mb, '.0f')}) | "
            f"{' / '.join(f'{ms:.0f}' for ms in x.passes_ms) or '-'} | {status} |"
        )
    return lines


def soak(res: BenchResult) -> list[str]:
    s = res.production.soak if res.production else None
    if s is None:
        return []
    e = s.slope_mb_per_h
    ci = f" (90% CI {e.low:.1f} to {e.high:.1f}, Theil-Sen through {e.n} block medians)" if e.has_interval else ""
    return [
        "",
        "## Soak" + (" (PARTIAL)" if s.partial else ""),
        "",
        f"- {s.variant} at c={s.concurrency} for {s.seconds:.0f} s of {s.planned_s:.0f} s{'; ' + s.reason if s.reason else ''}: "
        f"{_f(s.throughput_infer_s, '.1f')} infer/s, p99 {_f(s.p99_ms)} ms",
        f"- RSS {_f(s.rss_start_mb, '.1f')} -> {_f(s.rss_end_mb, '.1f')} MB; slope after the first {s.ramp_s:.0f} s: "
        f"**{_f(e.value, '.1f')} MB/h**{ci}; limit {res.settings.soak.memory_growth_mb_per_h:g} MB/h on the interval's lower end",
    ]


def sections(res: BenchResult) -> list[str]:
    """Every readiness section, in report order."""
    notes = ["", *(f"Not measured: {n}." for n in res.production.notes)] if res.production and res.production.notes else []
    return [*cold_start(res), *memory(res), *metrics(res), *overload(res), *soak(res), *notes]


def has_panels(res: BenchResult) -> bool:
    p = res.production
    return bool(p and (p.traces or p.overload))


def plot_memory(ax: Any, res: BenchResult) -> None:
    """RSS over the bench per server, and the soak with its fitted line."""
    prod = res.production
    assert prod is not None
    for tr in prod.traces:
        if tr.series:
            ax.plot([t for t, _ in tr.series], [mb for _, mb in tr.series], lw=1, label=tr.label)
    if prod.soak and prod.soak.series and prod.soak.slope_mb_per_h.value is not None:
        ax.set_title(f"RSS over the bench; soak slope {prod.soak.slope_mb_per_h.value:.1f} MB/h", fontsize=9)
    else:
        ax.set_title("RSS over the bench (tritonserver + stubs)", fontsize=9)
    ax.set(xlabel="seconds since the bench began", ylabel="RSS (MB)")
    ax.legend(fontsize=6)


def plot_overload(ax: Any, res: BenchResult) -> None:
    """Achieved rate and p99 per offered load level."""
    over = res.production.overload if res.production else None
    if over is None:
        ax.set_axis_off()
        return
    xs = [x for x in over.levels if x.achieved_rate is not None]
    ax.bar(range(len(xs)), [x.achieved_rate for x in xs], color="tab:blue", alpha=0.6, label="achieved /s")
    ax.plot(range(len(xs)), [x.offered_rate for x in xs], "k_", ms=20, label="offered /s")
    ax.set_xticks(range(len(xs)), [x.label for x in xs], fontsize=7)
    ax.set(ylabel="requests / s", title="overload: achieved vs offered; p99 (right)")
    ax2 = ax.twinx()
    ax2.plot(range(len(xs)), [x.p99_ms or 0 for x in xs], "o-", color="tab:red", label="p99 ms")
    ax2.set_ylabel("p99 (ms)")
    ax.legend(fontsize=7, loc="upper left")
