"""The side by side as people read it: one report section (deployments, boundary, table, ratios) and peers.png.

Rendering only: every number comes computed in the :class:`~pipeline.bench.peers.results.PeersResult`.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.bench.peers.results import Deployment, PeersResult
from pipeline.bench.report.rounds import _f, _invalid

_STYLE = {"triton": "C0", "same_graph": "C1", "native": "C2"}


def _sched(d: Deployment) -> str:
    if d.scheduling is None:
        return "its shipped config" if d.server == "triton" else "-"
    s = d.scheduling
    return f"batch_size {s.batch_size}, max_batch_delay {s.max_batch_delay_ms} ms, {s.workers} worker(s) <- {s.mirrors}"


def _cold(d: Deployment) -> str:
    c = d.cold
    return _f(c.start_to_ready_s, ".2f", " s") if c else "n/a"


def _errors(by_output: dict[str, float]) -> str:
    return "; ".join(f"{n}: {v:.2e}" for n, v in by_output.items()) or "-"


def console(res: PeersResult) -> str:
    """The stage's closing line's part: the server comparison at each level."""
    same = [r for r in res.ratios if r.name.startswith("triton_vs_torchserve_same_graph")]
    return "; Triton vs TorchServe same graph " + ("; ".join(f"c{r.concurrency} = {r.estimate.text()}" for r in same) or "not measured")


def boundary(res: PeersResult) -> list[str]:
    """Where each measurement starts and ends, what travels, and whether the two are comparable."""
    p = res.payload
    sizes = (
        f" Per request: Triton {p['triton_request_bytes']:.0f} B of tensor data out, {p['triton_response_bytes']:.0f} B back; "
        f"TorchServe a {p['torchserve_body_bytes']:.0f} B JSON body out, {p['torchserve_response_bytes']:.0f} B of JSON back."
        if {"triton_request_bytes", "torchserve_body_bytes", "triton_response_bytes", "torchserve_response_bytes"} <= set(p)
        else ""
    )
    return [
        "**Measurement boundary.** perf_analyzer times every server the same way: from its call to the complete response, one "
        "client machine-local over loopback, the same request rows in the same order, the same concurrency, closed loop.",
        "",
        "- **Triton**: KServe v2 over HTTP (`-i http`): a JSON header with the input tensors as raw binary (the binary tensor "
        "extension), the output back as binary. The server (C++) reads the tensors straight into the backend's buffers.",
        "- **TorchServe**: `--service-kind=torchserve -i http`: `POST /predictions/<model>`, multipart/form-data with one part `data` "
        "holding the handler's JSON body `{input_name: nested list}` (the same rows); the Java frontend hands the bytes to the "
        "Python worker over a Unix socket, the handler parses the JSON into numpy arrays, runs the model and answers "
        "`{output_name: nested list}` as JSON.",
        "- **Tokenization** happens in the client, before any timing, for both: the requests carry token ids (the rows the "
        "bench sends Triton), not text. A TorchServe handler that tokenizes text would add that work to its numbers.",
        "",
        "Comparable as served: the same work per request and the same timing boundary. The wire formats differ (binary "
        "tensors against JSON text, parsed in C++ against Python) and each server's number includes its own: that is the cost "
        "of the protocol each server is used with, not of the model." + sizes,
    ]


def section(res: PeersResult) -> list[str]:
    """The report's side-by-side section."""
    deps = list(res.deployments.values())
    lines = [
        "",
        "## Side by side: Triton and TorchServe",
        "",
        f"TorchServe {res.versions.get('torchserve', '?')} on Java {res.versions.get('java', '?')}, beside the embedded Triton, "
        "on the same machine at the same time (each idle while another is measured). **Same graph** serves the shipped ONNX "
        "file in ONNX Runtime with the Triton variant's threads and graph level: the server comparison. **Native** serves the "
        "PyTorch model as a TorchServe user ships it, in eager mode: the runtime comparison, labelled so.",
        "",
        "| deployment | runtime | scheduling (TorchServe <- Triton) |",
        "|---|---|---|",
    ]
    lines += [f"| {d.label} | {d.runtime} | {_sched(d)} |" for d in deps]
    lines += ["", *boundary(res), "", "### Headline (paired rounds: neighbouring runs, median with 90% interval)", ""]
    lines += [f"- `{r.name}` = **{r.estimate.text()}**: {r.meaning}" for r in res.ratios] or ["- no ratio: no TorchServe deployment was measured"]
    lines += [
        "",
        f"Rounds: {len({r.index for r in res.rounds})}, stopped: {res.stopped or 'n/a'}; perf_analyzer windows of {res.window_ms} ms "
        f"for every deployment; {res.seconds:.0f} s in all.",
        "",
    ]
    lines += table(res)
    lines += [
        "",
        "### Cold start",
        "",
        "| deployment | server start s | load / registration s | start to ready s | first request ms | warm p50 ms | first / warm | how |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in deps:
        c = d.cold
        if c is None:
            lines.append(f"| {d.label} | - | - | - | - | - | - | {d.error or 'not measured (bench.readiness.cold_start=false)'} |")
            continue
        lines.append(
            f"| {d.label} | {_f(c.server_start_s)} | {_f(c.load_s)} | {_f(c.start_to_ready_s)} | {_f(c.first_ms)} | "
            f"{_f(c.warm_p50_ms)} | {_f(c.first_vs_warm, unit='x')} | {d.cold_source} |"
        )
    lines += [
        "",
        "### Answers against Triton's (every sample row, the parity tolerance of the shipped file)",
        "",
        "| deployment | rows | failed | abs error | rel error | atol / rtol (stat) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in deps:
        a = d.agreement
        if a is None:
            continue
        tol = "; ".join(f"{n}: {t['atol']:g} / {t['rtol']:g} ({t['stat']})" for n, t in a.tolerance.items())
        lines.append(f"| {d.label} | {a.rows} | {a.failed} | {_errors(a.abs_error)} | {_errors(a.rel_error)} | {tol} | {'equal' if a.passed else '**differ**'} |")
    for d in deps:
        if d.error or d.log_excerpt:
            lines += ["", f"**{d.label}**: {d.error or 'some requests failed'}. Worker log:", "", "```", *d.log_excerpt, "```"]
    lines += ["", "TorchServe settings changed from its defaults:", *[f"- {s}" for s in res.settings]]
    lines += [*(["", *[f"- {n}" for n in res.notes]] if res.notes else []), "", "![side by side: throughput vs p99](peers.png)"]
    return lines


def table(res: PeersResult) -> list[str]:
    """One row per deployment and concurrency: the median-throughput run over the rounds."""
    lines = [
        "| deployment | c | p50 ms | p95 ms | p99 ms | infer/s | server queue ms | cold start s | peak RSS MB (its server) | status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in res.deployments.values():
        rss = res.rss.get(d.server_label, {}).get("rss_peak_mb")
        pts = res.points(d.key)
        if not pts:
            lines.append(f"| {d.label} | - | - | - | - | - | - | {_cold(d)} | {_f(rss, '.0f')} | {d.error or 'not measured'} |")
        for p in pts:
            m = p.metrics
            if not p.valid:
                lines.append(f"| {d.label} | {p.concurrency} | - | - | - | - | - | {_cold(d)} | {_f(rss, '.0f')} | {_invalid(p.reason, 90)} |")
                continue
            queue = m.get("server_queue_ms", m.get("torchserve_queue_ms"))
            lines.append(
                f"| {d.label} | {p.concurrency} | {m['p50_ms']:.2f} | {m['p95_ms']:.2f} | {m['p99_ms']:.2f} | {m['throughput_infer_s']:.1f} | "
                f"{_f(queue)} | {_cold(d)} | {_f(rss, '.0f')} | ok |"
            )
    return lines + [
        "",
        "Server queue: Triton's from perf_analyzer's server split, TorchServe's from its own ts_queue_latency_microseconds "
        "counter (per request). Peak RSS is the server process with everything it holds (Triton: tritonserver with both "
        "variants; TorchServe: its JVM and every worker of both schedules), over the side by side.",
    ]


def plot_png(res: PeersResult, path: Path, title: str) -> None:
    """Throughput against p99 for every deployment: colour by server and runtime, solid for throughput schedules."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for d in res.deployments.values():
        pts = [p for p in res.points(d.key) if p.valid]
        if not pts:
            continue
        xs, ys = [p.metrics["p99_ms"] for p in pts], [p.metrics["throughput_infer_s"] for p in pts]
        ax.plot(xs, ys, "o-" if d.variant == "throughput" else "s--", color=_STYLE.get(d.kind, "C3"), label=d.label)
        for p, x, y in zip(pts, xs, ys):
            ax.annotate(f"c{p.concurrency}", (x, y), fontsize=7)
    ax.set(xlabel="p99 latency (ms)", ylabel="inferences / s", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
