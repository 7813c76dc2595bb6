"""The text endpoint's section of report.md (pipeline/bench/text.py measured it)."""

from __future__ import annotations

from pipeline.bench.text import TextEndpointResult


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def section(t: TextEndpointResult) -> list[str]:
    """Headline, per-round table, the share of server time outside the tensor model, throughput per variant."""
    share = "n/a" if t.python_share is None else f"{t.python_share:.0%}"
    lines = [
        "",
        f"## Text endpoint ({t.model})",
        "",
        f"Text in, embedding out, as users call it. c=1 p50 / in-process (tokenize one sentence + ONNX Runtime, the latency "
        f"variant's settings): **{t.vs_in_process.text()}**. Against the tensor endpoint at c=1 in the same server and rounds: "
        f"{t.vs_tensor.text()}. Of the text endpoint's server time at c=1, {share} is spent outside the tensor model "
        "(tokenizing, Python, the BLS call).",
        "",
        "| round | order | text c=1 p50 ms | tensor c=1 p50 ms | in-process p50 ms | text / in-process |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(t.rounds, 1):
        lines.append(f"| {i} | {r.order} | {_ms(r.text_p50_ms)} | {_ms(r.tensor_p50_ms)} | {_ms(r.in_process_p50_ms)} | {_ms(r.ratio)} |")
    lines += ["", "| variant | text model instances | concurrency | infer/s | p50 ms | p99 ms |", "| --- | --- | --- | --- | --- | --- |"]
    for v, pts in t.throughput.items():
        for c, m in pts.items():
            if "error" in m:
                lines.append(f"| {v} | {t.instances.get(v, '?')} | {c} | not measured: {m['error']} | | |")
            else:
                lines.append(f"| {v} | {t.instances.get(v, '?')} | {c} | {_ms(m.get('throughput_infer_s'))} | {_ms(m.get('p50_ms'))} | {_ms(m.get('p99_ms'))} |")
    lines += ["", "The text model's instances are the tensor variant's of the same name: one tokenizing instance per ONNX Runtime instance."]
    return lines
