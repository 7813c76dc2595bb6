"""report.md's headline, its method, and the tables of rounds behind it (rendering only; see render.py)."""

from __future__ import annotations

from pipeline.stats.estimate import CONFIDENCE, Estimate
from pipeline.bench.measure.results import Point
from pipeline.bench.results import BenchResult
from pipeline.bench.analysis.ratios import headline_c1, standin_cost_ms


def _f(x: float | None, fmt: str = ".2f", unit: str = "") -> str:
    return "n/a" if x is None else format(x, fmt) + unit


def _x(x: float | None) -> str:
    return _f(x, unit="x")


def _invalid(reason: str, keep: int) -> str:
    """A table cell for an invalid measurement: the end of perf_analyzer's reason, its pipes escaped for Markdown."""
    return "INVALID: " + reason[-keep:].replace("|", "\\|")


def _bold(e: Estimate, fmt: str = ".2f", unit: str = "x") -> str:
    """``**1.05x** (90% CI 1.03-1.07x, 8 rounds)``."""
    text = e.text(fmt, unit)
    if e.value is None:
        return "**n/a**"
    head = f"{e.value:{fmt}}{unit}"
    return f"**{head}**{text[len(head) :]}"


def _standin_removed(res: BenchResult) -> str:
    """The headline without the python backend's measured cost, or why that cost was not taken off."""
    assert res.ratios is not None
    removed = res.ratios.latency_c1_p50_vs_ort_p50_standin_removed
    if removed:
        return f"; without the python backend's measured cost: {_x(removed)} (a lower bound for Triton's onnxruntime backend)"
    if (served := headline_c1(res).served) and (cost := standin_cost_ms(served)) is not None:
        return (
            f"; the python backend's mean cost ({cost:.2f} ms) is not below the served p50 ({served.metrics['p50_ms']:.2f} ms): stalls in"
            " the window weigh on means, not on medians, so it is not taken off"
        )
    return ""


def _c1(res: BenchResult) -> str:
    r = res.ratios
    assert r is not None  # ratios are computed before rendering
    pc = res.paired_c1
    line = f"- latency variant c=1 p50 / in-process ORT p50: {_bold(r.latency_c1)}"
    if not pc:
        return (
            line
            + f" ({_f(r.latency_c1_p50_ms)} ms vs {_f(r.ort_p50_ms)} ms: the sweep's c=1 point against the faster of the start/end baselines, unpaired)"
            + _standin_removed(res)
        )
    line += f"; medians over rounds: served p50 {_f(r.latency_c1_p50_ms)} ms, in-process ORT p50 {_f(r.ort_p50_ms)} ms"
    if pc.in_server_key:
        line += (
            f". It is served / the server's own ORT time (same window) {r.served_vs_in_server.text()} times the server's ORT time"
            f" / in-process ORT (alternating bursts) {r.in_server_vs_in_process.text()}; the serving path adds"
            f" {r.serving_overhead_ms.text('.2f', ' ms')} per request"
        )
    line += f". Unpaired (the c=1 point against the start/end baseline): {_x(r.latency_c1_p50_vs_ort_p50_unpaired)}"
    line += _standin_removed(res)
    return line + f"; queue share {_f(r.latency_c1_queue_share, '.1%')}"


def _tax(res: BenchResult) -> str:
    r = res.ratios
    assert r is not None
    unpaired = f"{_f(r.batching_tax_c1_ms_unpaired)} ms"
    pc = res.paired_c1
    if pc and any(x.throughput is not None for x in pc.rounds):
        return f"its p50 is {r.batching_tax_c1.text('.2f', ' ms')} above the latency variant's (both at c=1 next to each other in each c=1 round; unpaired: {unpaired})"
    return f"its p50 is {unpaired} above the latency variant's (unpaired points)"


def headline(res: BenchResult) -> list[str]:
    """The headline bullets: every ratio with its interval, the unpaired numbers beside them."""
    r = res.ratios
    assert r is not None, "ratios are computed before rendering"  # a programming error, not a user one
    lines = [_c1(res)]
    cmp = r.compared
    if not cmp:
        lines.append("- throughput / latency variant: not compared (no concurrency above 1 in bench.rounds.throughput.concurrency or bench.sweep.concurrency)")
    else:
        lines += [
            "- throughput / latency variant: "
            + "; ".join(f"c={x.concurrency} {_bold(x.vs_latency)}" for x in cmp)
            + " (unpaired: "
            + ", ".join(f"c={x.concurrency} {_x(x.vs_latency_unpaired)}" for x in cmp)
            + ")",
            f"- throughput variant / in-process best batch (batch {res.baseline.throughput.best_batch}): "
            + "; ".join(f"c={x.concurrency} {_bold(x.vs_ort_best)}" for x in cmp)
            + " (unpaired, against the start baseline: "
            + ", ".join(f"c={x.concurrency} {_x(x.vs_ort_best_unpaired)}" for x in cmp)
            + ")",
        ]
    lines.append(
        f"- batching tax at c=1: the throughput variant's requests wait {_f(r.throughput_c1_queue_ms)} ms in Triton's queue "
        f"({_f(r.throughput_c1_queue_share, '.1%')} of server time); {_tax(res)}"
    )
    return lines


def method(res: BenchResult) -> list[str]:
    """Which estimator, why drift that moves both sides of a pair alike cannot bias it, and why each group of rounds stopped."""
    pc, tp = res.paired_c1, res.paired_throughput
    if not pc and not tp:
        return []
    s = res.settings
    lines = [
        "",
        "## Method",
        "",
        f"Each headline is the median of per-round ratios with a {CONFIDENCE:.0%} percentile-bootstrap interval over rounds "
        "(scipy.stats.bootstrap). A round's ratio divides measurements taken next to each other, so a change of machine "
        "speed that slows both sides of a pair by the same factor cancels in that round's ratio: the estimate cannot move "
        "with it. A change that splits a pair unevenly makes an outlier, which the median resists and the interval shows; "
        "no round is dropped for drift, only rounds whose perf_analyzer window was invalid. Rounds stop once every "
        f"interval of their group is within +-{s.rounds.target_half_width:.0%} (bench.rounds.target_half_width, default profile), after "
        "bench.rounds.budget_s, or at their maximum; the rule reads widths, never values.",
        "",
    ]
    if pc and pc.in_server_key:
        lines.append(
            f"c=1 (embedded): served p50 / the server's own time inside ORT ({pc.in_server_key}) in the same perf_analyzer "
            f"window, times the server's ORT time / in-process ORT p50 from {s.rounds.alternations} alternating bursts of about "
            f"{s.rounds.alternation_ms:.0f} ms each. Rounds: {pc.stopped}."
        )
    elif pc:
        lines.append(f"c=1 (external: no in-server ORT timer): served p50 / the mean of in-process ORT p50 timed right before and after the run. Rounds: {pc.stopped}.")
    if pc:
        w = ", ".join(f"{x:.2f}" for x in pc.weights())
        lines.append(
            f"The c=1 median is weighted: each round by (fastest round's in-process ORT p50 / its own)^2 (weights {w}). "
            "Contention that takes the CPU away for 100 ms at a time hits the in-process side harder, so a contended "
            "round reads low; a weight that does not depend on the ratio leaves an unbiased median unbiased."
        )
    for c, t in tp.items():
        lines.append(
            f"c={c}: both variants back to back in one server, order alternating, in-process ORT at the best batch size timed next to the throughput run. Rounds: {t.stopped}."
        )
    return lines


def _served(p: Point | None, keep: int = 50) -> str:
    if p is None:
        return "-"
    return _f(p.metrics.get("p50_ms")) if p.valid else _invalid(p.reason, keep)


def c1_table(res: BenchResult) -> list[str]:
    pc = res.paired_c1
    if not pc:
        return []
    k = pc.in_server_key
    if not k:
        lines = [
            "",
            "## Latency c=1 rounds (in-process ORT p50 right before and after each served run)",
            "",
            "| round | ORT p50 before ms | served p50 ms | ORT p50 after ms | ratio |",
            "|---|---|---|---|---|",
        ]
        for r in pc.rounds:
            g = r.gauges + [None, None]
            lines.append(f"| {r.index} | {_f(g[0])} | {_served(r.latency, 60)} | {_f(g[1])} | {_x(r.ratio(k))} |")
        return lines
    lines = [
        "",
        f"## Latency c=1 rounds (served against the server's ORT time {k} in the same window; that against in-process ORT in alternating bursts)",
        "",
        "| round | order | served p50 ms | ORT in server ms | served / in-server | in-server / in-process (bursts) "
        "| in-process p50 ms | ratio | overhead ms | throughput variant p50 ms | tax ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in pc.rounds:
        bursts = [a.ratio for a in r.alternations if a.ratio is not None]
        spread = f"{_x(r.in_server_vs_in_process())} ({min(bursts):.2f}-{max(bursts):.2f}, {len(bursts)})" if bursts else "n/a"
        lines.append(
            f"| {r.index} | {' then '.join(r.order)} | {_served(r.latency)} | {_f(r.in_server_ms(k))} | {_x(r.served_vs_in_server(k))} "
            f"| {spread} | {_f(r.ort_p50_ms())} | {_x(r.ratio(k))} | {_f(r.overhead_ms(k))} | {_served(r.throughput)} | {_f(r.tax_ms())} |"
        )
    return lines


def throughput_table(res: BenchResult) -> list[str]:
    if not res.paired_throughput:
        return []
    lines = [
        "",
        "## Throughput vs latency variant rounds (one server holds both; order alternates; in-process ORT best-batch infer/s timed next to the throughput variant's run)",
        "",
        "| c | round | order | latency infer/s | throughput infer/s | ORT best infer/s | throughput / latency | throughput / ORT best | p50 latency / throughput ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def tput(p: Point) -> str:
        return _f(p.metrics.get("throughput_infer_s"), ".1f") if p.valid else _invalid(p.reason, 50)

    for c, t in res.paired_throughput.items():
        for r in t.rounds:
            lat, thr = r.latency, r.throughput
            lines.append(
                f"| {c} | {r.index} | {' then '.join(r.order)} | {tput(lat)} | {tput(thr)} | {r.gauge:.0f} | {_x(r.ratio())} "
                f"| {_x(r.vs_ort_best())} | {_f(lat.metrics.get('p50_ms'))} / {_f(thr.metrics.get('p50_ms'))} |"
            )
    return lines
