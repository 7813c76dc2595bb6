"""The text endpoint's section of report.md (pipeline/bench/text.py measured it)."""

from __future__ import annotations

from pipeline.bench.text import TextEndpointResult
from pipeline.bench.text_cache import CacheResult
from pipeline.bench.text_instances import InstanceChoice


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
    lines += ["", _instances(t.instance_choice)]
    return lines + (_cache(t.cache) if t.cache else [])


def _instances(c: InstanceChoice | None) -> str:
    """The text model's instance count: the shipped one, and what measuring the other said."""
    rule = "The text model's instances are the tensor variant's of the same name unless `variants.<v>.text_instances` sets them."
    if c is None:
        return rule + " The other count was not measured (bench.text.instances.enabled, or no other count fits the cores)."
    rounds = ", ".join(f"{_ms(s)} vs {_ms(o)}" for s, o in c.rounds)
    return (
        f"{rule} Throughput variant, c={c.concurrency}: {c.other} instances against the shipped {c.shipped}, infer/s "
        f"{c.ratio.text()} (paired rounds, shipped vs other: {rounds}). **Chosen: {c.verdict}.**"
    )


def _abs(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1e}"


def _cache(c: CacheResult) -> list[str]:
    """The response cache: headline ratios, hit ratio, the byte-identity check, the rounds."""
    hit = "n/a" if c.hit_ratio is None else f"{c.hit_ratio:.1%}"
    same = {True: "byte-identical", False: "**not byte-identical**", None: "not checked"}[c.identical]
    lines = [
        "",
        f"### Response cache ({c.model}, local, {c.size_mb} MB)",
        "",
        f"{c.requests} texts drawn from the {c.distinct} distinct sample sentences they use with a Zipf law (s={c.zipf_s}), sent at "
        f"c={c.concurrency} to the throughput variant with the cache off and on, in paired rounds. With the cache: p50 "
        f"**{c.p50_speedup.text()}** faster, infer/s **{c.throughput_ratio.text()}**; {hit} of the requests were answered from "
        f"the cache (Triton's cache_hit / (cache_hit + cache_miss)). {c.checked} texts new to the cache, each asked once "
        f"without it and twice with it (a miss, then a hit): {same}. The workload's texts as cached from the batches they "
        f"rode in differ from each asked alone by at most {_abs(c.batched_max_abs)} (padding to a batch's longest row: "
        "batching's rounding, with or without a cache). The sample is small, so after its first pass every text is "
        "cached: a real query stream with a long tail of new texts hits less.",
        "",
        "| round | order | off p50 ms | on p50 ms | off infer/s | on infer/s | hit ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(c.rounds, 1):
        ratio = "n/a" if r.hit_ratio is None else f"{r.hit_ratio:.1%}"
        lines.append(f"| {i} | {r.order} | {_ms(r.off_p50_ms)} | {_ms(r.on_p50_ms)} | {_ms(r.off_infer_s)} | {_ms(r.on_infer_s)} | {ratio} |")
    lines += [f"- round {i}: {r.error}" for i, r in enumerate(c.rounds, 1) if r.error]
    return lines
