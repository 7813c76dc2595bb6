"""A bench result as people and DVC read it: report.md, bench.png, and per-variant curves for dvc plots.

Rendering only: every number and finding comes computed in the :class:`BenchResult`, so a report
rendered again from a bench.json (:meth:`BenchResult.from_json`) has the same text.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from pathlib import Path

import numpy as np

from pipeline.bench.measured import Bracketed, Point
from pipeline.bench.ratios import paired_throughput
from pipeline.bench.results import BenchResult
from pipeline.core.atomic import write_text

CURVE_FIELDS = ["concurrency", "p50_ms", "p95_ms", "p99_ms", "throughput_infer_s", "server_queue_ms", "server_compute_infer_ms", "avg_batch"]


def curves_csv(res: BenchResult, variant: str) -> str:
    """Plot data for dvc plots: one row per valid concurrency point."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CURVE_FIELDS, lineterminator="\n")
    w.writeheader()
    for p in res.variants[variant].points:
        if p.valid:
            row = {**p.metrics, "concurrency": p.concurrency, "avg_batch": p.avg_batch}
            w.writerow({k: (row.get(k) if row.get(k) is not None else "") for k in CURVE_FIELDS})
    return buf.getvalue()


def _standin(res: BenchResult) -> str:
    """The embedded server's stand-in backend (reports written before the native backend only had python)."""
    if res.server.mode != "embedded":
        return ""
    return "pipeline_ort" if res.server.backend == "native" else "python"


def plot_png(res: BenchResult, path: Path) -> None:
    """Throughput vs p99 per variant, with the in-process best as a reference line."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, sweep in res.variants.items():
        pts = [p.metrics | {"concurrency": p.concurrency} for p in sweep.points if p.valid]
        if not pts:
            continue
        ax1.plot([p["p99_ms"] for p in pts], [p["throughput_infer_s"] for p in pts], "o-", label=name)
        for p in pts:
            ax1.annotate(f"c{p['concurrency']}", (p["p99_ms"], p["throughput_infer_s"]), fontsize=7)
        cs = np.arange(len(pts))
        ax2.bar(cs + (0.4 if name != "latency" else 0), [p["server_queue_ms"] for p in pts], 0.4, label=f"{name} queue")
        ax2.bar(cs + (0.4 if name != "latency" else 0), [p["server_ms"] - p["server_queue_ms"] for p in pts], 0.4,
                bottom=[p["server_queue_ms"] for p in pts], label=f"{name} compute", alpha=0.6)  # fmt: skip
        ax2.set_xticks(cs + 0.2, [f"c{p['concurrency']}" for p in pts])
    best = res.baseline.throughput.best_infer_s
    if best:
        ax1.axhline(best, ls="--", c="gray", label=f"in-process ORT best ({best:.0f}/s)")
    ax1.set(xlabel="p99 latency (ms)", ylabel="inferences / s", title="throughput vs p99")
    ax2.set(ylabel="server time (ms)", title="server queue vs compute")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=7)
    mode = res.server.mode
    what = f"{_standin(res)} + ONNX Runtime stand-in, shipped scheduling config" if mode == "embedded" else "shipped repository"
    fig.suptitle(f"{res.model.name}: server mode {mode} ({what})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _f(x: float | None, fmt: str = ".2f", unit: str = "") -> str:
    return "n/a" if x is None else format(x, fmt) + unit


def _x(x: float | None) -> str:
    return _f(x, unit="x")


def _counted(p: Bracketed, rounds: str) -> str:
    """'median of N of M <rounds>, range lo-hix' for paired rounds with a ratio."""
    lo, hi = p.ratio_range or [0.0, 0.0]
    return f"median of {len(p.counted)} of {len(p.rounds)} {rounds}, range {lo:.2f}-{hi:.2f}x"


def _pairing(res: BenchResult) -> str:
    p = res.paired_c1
    if not p:
        return "unpaired: sweep c=1 point vs the faster of the start/end baselines"
    if p.ratio is None:
        return f"paired, no round counted: {p.reason}"
    # The p50s shown beside the ratio are medians of their own: with rounds in fast and slow phases their
    # quotient can differ from the median of the per-round ratios, which is the headline.
    unpaired = res.ratios.latency_c1_p50_vs_ort_p50_unpaired if res.ratios else None
    counted = _counted(p, "paired rounds' ratios")
    return f"each a median over the counted rounds; ratio: {counted}; unpaired sweep ratio {_x(unpaired)}"


def _throughput_pairing(res: BenchResult) -> str:
    parts = []
    for cmp in res.ratios.compared if res.ratios else []:
        c, p = cmp.concurrency, paired_throughput(res, cmp.concurrency)
        if not p:
            parts.append(f"c={c} unpaired: the sweep's points, measured minutes apart")
        elif p.ratio is None:
            parts.append(f"c={c} paired, no round counted: {p.reason}")
        else:
            parts.append(f"c={c}: {_counted(p, 'paired rounds')}, unpaired sweep ratio {_x(cmp.vs_latency_unpaired)}")
    return "; ".join(parts)


def _gauges(gauges: list[float]) -> str:
    """A round's in-process gauges (infer/s) in the order they were timed, for a table cell."""
    return " / ".join(f"{g:.0f}" for g in gauges)


def _invalid(reason: str, keep: int) -> str:
    """A table cell for an invalid measurement: the end of perf_analyzer's reason, its pipes escaped for Markdown."""
    return "INVALID: " + reason[-keep:].replace("|", "\\|")


def _paired_table(res: BenchResult) -> list[str]:
    p = res.paired_c1
    if not p:
        return []
    also = f" and the server's own time inside ORT during the run ({p.in_server_key}, mean)" if p.in_server_key else ""
    lines = ["", f"## Latency c=1 paired with in-process ORT (a round counts if its two ORT p50s{also} agree within {p.max_drift:.0%})", "",
             "| round | ORT p50 before ms | served p50 ms | ORT in server ms | ORT p50 after ms | drift | ratio | counted |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in p.rounds:
        s = r.steps[0]
        served = _f(s.metrics.get("p50_ms")) if s.valid else _invalid(s.reason, 60)
        lines.append(f"| {r.index} | {r.gauges[0]:.2f} | {served} | {_f(r.in_server_gauge)} | {r.gauges[-1]:.2f} | "
                     f"{r.drift:.0%} | {_x(r.ratio)} | {'yes' if r.counted else 'no'} |")  # fmt: skip
    return lines


def _paired_throughput_table(res: BenchResult) -> list[str]:
    if not res.paired_throughput:
        return []
    drift = next(iter(res.paired_throughput.values())).max_drift
    lines = ["", "## Throughput vs latency variant, paired: one server holds both; in-process ORT best-batch throughput is timed "
             f"before, between and after the two runs (a round counts if all three agree within {drift:.0%}); order alternates", "",
             "| c | round | order | ORT best infer/s: before / between / after | latency infer/s | throughput infer/s | drift "
             "| throughput / latency | throughput / ORT best | p50 latency / throughput ms | counted |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip

    def tput(p: Point) -> str:
        return _f(p.metrics.get("throughput_infer_s"), ".1f") if p.valid else _invalid(p.reason, 50)

    for c, p in res.paired_throughput.items():
        for r in p.rounds:
            lat, thr = p.run(r, "latency"), p.run(r, "throughput")
            lines.append(f"| {c} | {r.index} | {' then '.join(s.variant for s in r.steps)} | {_gauges(r.gauges)} | "
                         f"{tput(lat)} | {tput(thr)} | {r.drift:.0%} | {_x(r.ratio)} | {_x(p.round_vs_ort_best(r))} | "
                         f"{_f(lat.metrics.get('p50_ms'))} / {_f(thr.metrics.get('p50_ms'))} | {'yes' if r.counted else 'no'} |")  # fmt: skip
    return lines


def _tax_p50_text(res: BenchResult) -> str:
    """The batching tax as a p50 difference: paired when c=1 rounds ran and one counted, else the sweep's."""
    r = res.ratios
    unpaired = f"{_f(r.batching_tax_c1_ms_unpaired if r else None)} ms"
    if not paired_throughput(res, 1):
        return f"its p50 is {unpaired} above the latency variant's (unpaired sweep points)"
    if r is None or r.batching_tax_c1_ms is None:
        return f"no paired c=1 round counted, so no same-minute p50 difference (see machine_drift); unpaired sweep: {unpaired}"
    return f"its p50 is {_f(r.batching_tax_c1_ms)} ms above the latency variant's (paired rounds, see below; unpaired sweep: {unpaired})"


def _headline(res: BenchResult) -> list[str]:
    r = res.ratios
    assert r is not None, "ratios are computed before rendering"  # a programming error, not a user one
    cmp = r.compared
    removed = r.latency_c1_p50_vs_ort_p50_standin_removed
    lines = [
        f"- latency variant c=1 p50 / in-process ORT p50: **{_x(r.latency_c1_p50_vs_ort_p50)}** "
        f"({_f(r.latency_c1_p50_ms)} ms vs {_f(r.ort_p50_ms)} ms, {_pairing(res)}); queue share {_f(r.latency_c1_queue_share, '.1%')}"
        + (f"; without the python backend's measured cost: {_x(removed)} (a lower bound for Triton's onnxruntime backend)" if removed else ""),
    ]
    if not cmp:
        lines.append("- throughput / latency variant: not compared (no concurrency above 1 in bench.paired_throughput_concurrency "
                     "or bench.concurrency)")  # fmt: skip
    else:
        lines += [
            "- throughput / latency variant: " + ", ".join(f"c={x.concurrency} **{_x(x.vs_latency)}**" for x in cmp) + f" ({_throughput_pairing(res)})",
            "- throughput variant / in-process best batch: " + ", ".join(f"c={x.concurrency} {_x(x.vs_ort_best)}" for x in cmp)
            + (f" (paired: in-process ORT at batch {res.baseline.throughput.best_batch} timed around each round; "
               "unpaired against the start baseline: " + ", ".join(f"c={x.concurrency} {_x(x.vs_ort_best_unpaired)}" for x in cmp) + ")"
               if res.paired_throughput else ""),
        ]  # fmt: skip
    lines.append(f"- batching tax at c=1: the throughput variant's requests wait {_f(r.throughput_c1_queue_ms)} ms in Triton's queue "
                 f"({_f(r.throughput_c1_queue_share, '.1%')} of server time); {_tax_p50_text(res)}")  # fmt: skip
    return lines


def _measurements(res: BenchResult) -> list[str]:
    lines = [
        "## Measurements (perf_analyzer, client-side percentiles; server split from --verbose-csv)",
        "",
        *(["The sweep measures one point after another, each variant in its own server: rows taken minutes apart are not "
           "comparable on a machine whose speed drifts. Variant against variant, and served against in-process, are in the "
           "paired tables below.", ""] if res.paired_throughput or res.paired_c1 else []),
        "| variant | c | p50 ms | p95 ms | p99 ms | infer/s | queue ms | compute ms | queue share | avg batch | load 1m | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, sweep in res.variants.items():
        for p in sweep.points:
            m = p.metrics
            if p.valid:
                comp = m["server_compute_input_ms"] + m["server_compute_infer_ms"] + m["server_compute_output_ms"]
                lines.append(
                    f"| {name} | {p.concurrency} | {m['p50_ms']:.2f} | {m['p95_ms']:.2f} | {m['p99_ms']:.2f} | "
                    f"{m['throughput_infer_s']:.1f} | {m['server_queue_ms']:.2f} | {comp:.2f} | {m['queue_share']:.1%} | "
                    f"{_f(p.avg_batch)} | {_f(m.get('loadavg_1m'))} | ok |"
                )
            else:
                lines.append(f"| {name} | {p.concurrency} | - | - | - | - | - | - | - | - | - | {_invalid(p.reason, 90)} |")
    b = res.baseline
    lat, thr, after = b.latency, b.throughput, b.latency_after
    settings = asdict(lat.settings) if lat.settings else None
    return lines + [
        "",
        "## In-process ONNX Runtime baseline (same file, same inputs, same thread counts)",
        "",
        f"- batch 1: p50 {_f(lat.p50_ms)} ms, p95 {_f(lat.p95_ms)} ms, p99 {_f(lat.p99_ms)} ms "
        f"over {lat.n} runs after warmup; settings {settings} (measured before and after the sweep; "
        f"the faster is used, the other p50 was {_f(after.p50_ms if after else None)} ms)",
        f"- best throughput {_f(thr.best_infer_s, '.1f')} infer/s at batch {thr.best_batch}; per batch: "
        + ", ".join(f"{k}: {v:.1f}" for k, v in thr.per_batch_infer_s.items()),
    ]


def _tuning(res: BenchResult) -> list[str]:
    t = res.tuning
    if not t:
        return []
    lines = ["", "## Tuning of the throughput variant", "",
             f"Budget p99 <= {t.latency_budget_ms} ms at concurrency {t.concurrency}. Ranked by infer/s over in-process ORT "
             f"best-batch infer/s timed before and after each candidate (the gauges); a candidate counts only if its gauges "
             f"agree within {t.max_drift:.0%}, else it is measured again.", "",
             "| queue delay us | preferred | instances | p99 ms | infer/s | gauges infer/s | drift | vs in-process | avg batch | within budget | steady |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in t.candidates:
        s = c.scheduling
        steady = "yes" if c.steady else f"no ({c.rounds} rounds)"
        lines.append(f"| {s.max_queue_delay_us} | {s.preferred_batch_sizes} | {s.instance_count} | {_f(c.p99_ms)} | "
                     f"{_f(c.throughput_infer_s, '.1f')} | {_gauges(c.gauges)} | {c.drift:.0%} | {_f(c.vs_ort_best, '#.3g', unit='x')} | "
                     f"{_f(c.avg_batch)} | {'yes' if c.within_budget else 'no'} | {steady} |")  # fmt: skip
    lead = t.lead_over_next
    ahead = f", {lead:.1%} ahead of the next candidate (one measurement each: a lead of a few percent may be noise)" if lead is not None else ""
    return lines + ["", f"Chosen: {asdict(t.chosen) if t.chosen else None}{ahead}. Persist with: `{t.persist}`"]


def markdown(res: BenchResult) -> str:
    """The human report: mode, machine, headline, measurements, paired rounds, diagnosis, tuning."""
    m, s, i = res.machine, res.server, res.inputs
    lines = [
        f"# Benchmark: {res.model.name}",
        "",
        f"**Server mode: {s.mode}.** {s.description}",
        "",
        f"Machine: {m.cpu_model}, {m.cores_available} cores available (of {m.cpu_count}); load average at start "
        f"{m.loadavg_start}, at end {m.loadavg_end}. Versions: " + ", ".join(f"{k} {v}" for k, v in m.versions.items()) + ".",
        f"Inputs: {i.requests} batch-1 requests from the model's samples ({i.policy}, {i.distinct_shapes} distinct shapes).",
        "",
        "## Headline",
        "",
        *_headline(res),
        "",
        *_measurements(res),
        *_paired_table(res),
        *_paired_throughput_table(res),
        "",
        "## Diagnosis",
        "",
    ]
    lines += [f"- **{d.severity}** `{d.rule}` ({d.variant}): {d.message}. Fix: {d.fix}." for d in res.diagnosis] or ["- nothing found"]
    lines += _tuning(res)
    lines += ["", "![throughput vs p99](bench.png)", ""]
    return "\n".join(lines)


def write_outputs(res: BenchResult, out_dir: Path) -> None:
    """Report and plot into ``out_dir`` (the caller makes it atomic)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "report.md", markdown(res))
    plot_png(res, out_dir / "bench.png")
