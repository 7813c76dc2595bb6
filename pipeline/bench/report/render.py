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

from pipeline.bench.report import peers as render_peers
from pipeline.bench.report import text as render_text
from pipeline.bench.report import readiness as render_readiness
from pipeline.bench.report import rounds as render_rounds
from pipeline.bench.report.rounds import _f, _invalid
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

    extra = render_readiness.has_panels(res)
    fig, axes = plt.subplots(2 if extra else 1, 2, figsize=(11, 8.4 if extra else 4.2), squeeze=False)
    (ax1, ax2) = axes[0]
    if extra:
        render_readiness.plot_memory(axes[1][0], res)
        render_readiness.plot_overload(axes[1][1], res)
    for name, sweep in res.variants.items():
        pts = [p.metrics | {"concurrency": p.concurrency} for p in sweep.points if p.valid]
        if not pts:
            continue
        ax1.plot([p["p99_ms"] for p in pts], [p["throughput_infer_s"] for p in pts], "o-", label=name)
        for p in pts:
            ax1.annotate(f"c{p['concurrency']}", (p["p99_ms"], p["throughput_infer_s"]), fontsize=7)
        cs = np.arange(len(pts))
        ax2.bar(cs + (0.4 if name != "latency" else 0), [p["server_queue_ms"] for p in pts], 0.4, label=f"{name} queue")
        ax2.bar(
            cs + (0.4 if name != "latency" else 0),
            [p["server_ms"] - p["server_queue_ms"] for p in pts],
            0.4,
            bottom=[p["server_queue_ms"] for p in pts],
            label=f"{name} compute",
            alpha=0.6,
        )
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


def _measurements(res: BenchResult) -> list[str]:
    lines = [
        "## Measurements (perf_analyzer, client-side percentiles; server split from --verbose-csv)",
        "",
        *(
            [
                "Rows taken minutes apart are not comparable on a machine whose speed drifts: variant against variant, and served "
                "against in-process, are in the headline and the tables of rounds below.",
                "",
            ]
            if res.paired_throughput or res.paired_c1
            else []
        ),
        *(
            [
                f"Points marked *rounds* are the median-throughput measurement of that variant and concurrency over the rounds "
                f"(bench.profile={res.settings.profile}: no separate sweep).",
                "",
            ]
            if any(s.source == "rounds" for s in res.variants.values())
            else []
        ),
        "| variant | c | p50 ms | p95 ms | p99 ms | infer/s | queue ms | compute ms | queue share | avg batch | load 1m | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, sweep in res.variants.items():
        for p in sweep.points:
            m = p.metrics
            if p.valid:
                comp = m["server_compute_input_ms"] + m["server_compute_infer_ms"] + m["server_compute_output_ms"]
                lines.append(
                    f"| {name} | {p.concurrency} | {m['p50_ms']:.2f} | {m['p95_ms']:.2f} | {m['p99_ms']:.2f} | "
                    f"{m['throughput_infer_s']:.1f} | {m['server_queue_ms']:.2f} | {comp:.2f} | {m['queue_share']:.1%} | "
                    f"{_f(p.avg_batch)} | {_f(m.get('loadavg_1m'))} | {'ok' if sweep.source == 'sweep' else 'ok (rounds)'} |"
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
        f"- best throughput {_f(thr.best_infer_s, '.1f')} infer/s at batch {thr.best_batch}; per batch: " + ", ".join(f"{k}: {v:.1f}" for k, v in thr.per_batch_infer_s.items()),
    ]


def _tune(res: BenchResult) -> list[str]:
    """The tune stage's outcome for the throughput variant measured here, and its side by side with Model Analyzer."""
    t = res.tune
    if t is None:
        return []
    lines = ["", "## Tuning of the throughput variant (the tune stage)", "", f"- {t.source}: ships `{t.winner.label()}` ({t.reason})"]
    for title, c in (("against the configured variant", t.vs_start), ("against Model Analyzer's best", t.vs_model_analyzer)):
        if c is not None:
            lines.append(f"- {title}: {c.ratio.text()} in infer/s at c={t.concurrency}; p99 {_f(c.a_p99_ms)} ms vs {_f(c.b_p99_ms)} ms")
    if t.model_analyzer is not None:
        ma = t.model_analyzer
        lines.append(
            f"- Model Analyzer: searched {ma.wall_s:g} s (ours {t.wall_s:g} s), best `{ma.knobs.label() if ma.knobs else 'n/a'}`"
            if ma.ran
            else f"- Model Analyzer not run: {ma.error}"
        )
    return lines + ["- every candidate: artifacts/reports/tune.md"]


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
        *render_rounds.headline(res),
        *render_rounds.method(res),
        "",
        *_measurements(res),
        *render_rounds.c1_table(res),
        *render_rounds.throughput_table(res),
        *render_readiness.sections(res),
        *(render_peers.section(res.peers) if res.peers else []),
        *(render_text.section(res.text) if res.text else []),
        "",
        "## Diagnosis",
        "",
    ]
    lines += [f"- **{d.severity}** `{d.rule}` ({d.variant}): {d.message}. Fix: {d.fix}." for d in res.diagnosis] or ["- nothing found"]
    lines += _tune(res)
    lines += ["", "![throughput vs p99](bench.png)", ""]
    return "\n".join(lines)


def write_outputs(res: BenchResult, out_dir: Path) -> None:
    """Report and plot into ``out_dir`` (the caller makes it atomic)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "report.md", markdown(res))
    plot_png(res, out_dir / "bench.png")
    if res.peers:
        render_peers.plot_png(res.peers, out_dir / "peers.png", f"{res.model.name}: Triton and TorchServe, throughput against p99")


def console_line(res: BenchResult, seconds: float) -> str:
    """The stage's one closing line: every headline with its interval, and how long the bench took."""
    r = res.ratios
    assert r is not None, "ratios are computed before rendering"
    compared = "; ".join(f"c{x.concurrency} = {x.vs_latency.text()}" for x in r.compared) or "not compared"
    best = "; ".join(f"c{x.concurrency} = {x.vs_ort_best.text()}" for x in r.compared) or "not compared"
    return (
        f"[bench] {res.server.mode} mode, profile {res.settings.profile}; latency c=1 p50 / in-process ORT p50 = {r.latency_c1.text()}; "
        f"throughput/latency {compared}; throughput/in-process best batch {best}; batching tax c=1 "
        f"{r.batching_tax_c1.text('.2f', ' ms')}{render_peers.console(res.peers) if res.peers else ''}"
        f"{f'; text endpoint c=1 p50 / in-process tokenize + ORT = {res.text.vs_in_process.text()}' if res.text else ''} ({seconds:.0f} s)"
    )
