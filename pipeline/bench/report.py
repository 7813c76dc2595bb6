"""Bench results -> headline ratios, diagnosis, markdown report, PNG plot, dvc plot data.

Each diagnosis names a rule, what was measured, and what to change, so a config tuned
for the wrong job (e.g. a queue delay on the latency path) cannot go unnoticed.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.atomic import write_text

Result = dict[str, Any]


def point(res: Result, variant: str, c: int) -> dict | None:
    """The valid measurement of ``variant`` at concurrency ``c``, or None."""
    p = res["variants"].get(variant, {}).get("points", {}).get(f"c{c}")
    return p if p and p.get("valid") else None


SERVED_VS_ORT_LIMIT = 1.15  # issue 4: latency variant c=1 p50 at most this times in-process ORT p50


def headline_c1(res: Result) -> tuple[dict | None, float | None, str]:
    """The served c=1 metrics and in-process ORT p50 behind the headline ratio, and how they were paired.

    ``paired``: the counted round with the median ratio (see measure.paired_c1); ``unpaired``:
    the sweep's c=1 point against the start/end baseline (when bench.paired_rounds=0);
    ``drifted``: paired rounds ran but none counted, so there is no headline number.
    """
    paired = res.get("paired_c1")
    if paired:
        counted = sorted((r for r in paired["rounds"] if r["counted"]), key=lambda r: r["ratio"])
        if not counted:
            return None, None, "drifted"
        mid = counted[(len(counted) - 1) // 2]
        return mid["served"], mid["gauge_mean"], "paired"
    return point(res, "latency", 1), res["baseline"].get("latency", {}).get("p50_ms"), "unpaired"


def paired_throughput(res: Result, c: int) -> dict | None:
    """The paired throughput/latency rounds at concurrency ``c`` (see measure.paired_throughput), if they ran."""
    return (res.get("paired_throughput") or {}).get(f"c{c}")


def standin_cost_ms(served: dict | None) -> float | None:
    """Triton compute infer minus the stand-in's mean time inside ORT: the python backend's cost per request."""
    if not served or "standin_ort_ms" not in served:
        return None
    return served["server_compute_infer_ms"] - served["standin_ort_ms"]


def ratios(res: Result) -> dict[str, float | None]:
    """The headline numbers: served vs in-process, and throughput vs latency variant."""
    out: dict[str, float | None] = {}
    lat1 = point(res, "latency", 1)
    base = res["baseline"]
    b_lat = base.get("latency", {}).get("p50_ms")
    paired = res.get("paired_c1")
    served, ort_p50, _ = headline_c1(res)
    counted = paired if paired and paired.get("ratio") else None  # medians over counted rounds, when there are any
    out["latency_c1_p50_ms"] = counted["served_p50_ms"] if counted else (served or {}).get("p50_ms")
    out["ort_p50_ms"] = counted["ort_p50_ms"] if counted else ort_p50
    if paired:
        out["latency_c1_p50_vs_ort_p50"] = paired.get("ratio")
        out["latency_c1_paired_rounds_counted"] = paired["counted_rounds"]
    else:
        out["latency_c1_p50_vs_ort_p50"] = served["p50_ms"] / ort_p50 if served and ort_p50 else None
    # Embedded only: the python backend's own cost, measured by the stand-in (Triton compute infer minus the
    # mean time inside ORT), taken off the served p50. Triton's onnxruntime backend has some cost of its own
    # there too, so this is a lower bound for it, never the headline.
    cost = standin_cost_ms(served)
    out["latency_c1_p50_vs_ort_p50_standin_removed"] = (
        (served["p50_ms"] - cost) / ort_p50 if served and ort_p50 and cost is not None and out["latency_c1_p50_vs_ort_p50"] else None
    )
    # The sweep's c=1 point against the start/end baseline: kept to show what pairing corrects.
    out["latency_c1_p50_vs_ort_p50_unpaired"] = lat1["p50_ms"] / b_lat if lat1 and b_lat else None
    out["latency_c1_queue_share"] = lat1["queue_share"] if lat1 else None
    best = base.get("throughput", {}).get("best_infer_s")
    for c in (8, 16):
        lat, thr = point(res, "latency", c), point(res, "throughput", c)
        unpaired = thr["throughput_infer_s"] / lat["throughput_infer_s"] if lat and thr else None
        pair = paired_throughput(res, c)
        # Paired (both variants in one server, same bracketed round) when it ran; None if it ran and nothing counted.
        out[f"throughput_vs_latency_c{c}"] = pair.get("ratio") if pair else unpaired
        out[f"throughput_vs_latency_c{c}_unpaired"] = unpaired
        if pair:
            out[f"throughput_vs_latency_c{c}_paired_rounds_counted"] = pair["counted_rounds"]
        unpaired_best = thr["throughput_infer_s"] / best if thr and best else None
        out[f"throughput_vs_ort_best_c{c}"] = pair.get("throughput_vs_ort_best") if pair else unpaired_best
        out[f"throughput_vs_ort_best_c{c}_unpaired"] = unpaired_best
    thr1 = point(res, "throughput", 1)
    # The batching tax, two ways: the queue wait Triton measured on the throughput variant at c=1 (direct), and
    # its p50 above the latency variant's (paired when c=1 is in bench.paired_throughput_concurrency).
    out["throughput_c1_queue_ms"] = thr1["server_queue_ms"] if thr1 else None
    out["throughput_c1_queue_share"] = thr1["queue_share"] if thr1 else None
    unpaired_tax = thr1["p50_ms"] - lat1["p50_ms"] if thr1 and lat1 else None
    pair1 = paired_throughput(res, 1)
    out["batching_tax_c1_ms"] = pair1.get("p50_delta_ms") if pair1 else unpaired_tax
    out["batching_tax_c1_ms_unpaired"] = unpaired_tax
    return out


def diagnose(res: Result, configs: dict[str, mc.ModelConfig], graph_dtypes: dict[str, str], cores: int, threshold: float, min_ms: float = 0.1) -> list[dict]:
    """Rules over the measurements and configs; each finding carries its evidence."""
    out: list[dict] = []

    def add(rule: str, severity: str, variant: str, message: str, fix: str) -> None:
        out.append({"rule": rule, "severity": severity, "variant": variant, "message": message, "fix": fix})

    for name, cfg in configs.items():
        p1 = point(res, name, 1)
        if p1 and p1["queue_share"] > threshold and p1["server_queue_ms"] > min_ms:
            # On the latency variant this is the failure it exists to prevent; on the throughput one it is the expected price.
            sev = "error" if name == "latency" else "info"
            add("batching_tax", sev, name,
                f"at concurrency 1, {p1['server_queue_ms']:.2f} ms of {p1['server_ms']:.2f} ms server time "
                f"({p1['queue_share']:.0%}) is queue wait (threshold {threshold:.0%}); p50 {p1['p50_ms']:.2f} ms",
                "remove dynamic_batching or set max_queue_delay_microseconds to 0 on the latency variant"
                if name == "latency" else "expected for a batching variant: send latency-bound traffic to the latency variant")  # fmt: skip
        threads = sum(g.count or 1 for g in cfg.instance_group) * max(1, int(cfg.parameters["intra_op_thread_count"].string_value or 0) if "intra_op_thread_count" in cfg.parameters else 1)
        if threads > cores:
            add("oversubscription", "warning", name,
                f"instances x intra_op threads = {threads} > {cores} cores available",
                "lower instance_group count or variants.<name>.intra_op_threads so the product fits the cores")  # fmt: skip
        for i in cfg.input:
            want = graph_dtypes.get(i.name)
            have = mc.DataType.Name(i.data_type).removeprefix("TYPE_").lower()
            norm = {"fp32": "float32", "fp16": "float16", "fp64": "float64"}.get(have, have)
            if want and norm != want:
                add("input_dtype", "error", name, f"config input '{i.name}' is {mc.DataType.Name(i.data_type)} but the model takes {want}",
                    "re-render the config from the ONNX graph (repository stage)")  # fmt: skip
        if cfg.HasField("optimization") and cfg.optimization.graph.level == 2:
            add("graph_level_off", "warning", name, "optimization.graph.level is 2, which turns ONNX Runtime graph optimization OFF",
                "set variants.<name>.graph_optimization_level=1 (Triton ORT: 1 = extended, 0 = all, 2 = off)")  # fmt: skip
    better_fix = "tune it (bench.tune=true) or check that requests can be batched (equal shapes, bench.input_shapes)"
    swept = {int(k[1:]) for v in res["variants"].values() for k in v.get("points", {})}
    for c in sorted(swept | {int(k[1:]) for k in res.get("paired_throughput") or {}}):
        lat, thr, pair = point(res, "latency", c), point(res, "throughput", c), paired_throughput(res, c)
        if pair and pair.get("ratio") is not None:
            # The paired rounds saw both variants in the same minute: they outrank the sweep's points.
            # Below c=4 there is too little concurrency to batch: the throughput variant is not expected to win.
            if c >= 4 and pair["ratio"] <= 1:
                add("throughput_not_better", "warning", "throughput",
                    f"at concurrency {c} the throughput variant gives {pair['throughput_infer_s']:.1f} infer/s, not more than the "
                    f"latency variant's {pair['latency_infer_s']:.1f} (median of {pair['counted_rounds']} paired rounds)", better_fix)  # fmt: skip
        elif pair:
            add("machine_drift", "warning", "throughput", f"no paired throughput/latency ratio at concurrency {c}: {pair['reason']}",
                "re-run on a quiet machine, or raise bench.paired_throughput_max_rounds / bench.paired_max_drift")  # fmt: skip
        elif c >= 4 and lat and thr and thr["throughput_infer_s"] <= lat["throughput_infer_s"] and not res.get("paired_throughput"):
            # Only without paired rounds: sweep points of two servers minutes apart, on this VM, flip either way.
            add("throughput_not_better", "warning", "throughput",
                f"at concurrency {c} the throughput variant gives {thr['throughput_infer_s']:.1f} infer/s, "
                f"not more than the latency variant's {lat['throughput_infer_s']:.1f}", better_fix)  # fmt: skip
    shapes = res.get("inputs", {}).get("distinct_shapes", 1)
    for name, cfg in configs.items():
        top = max((int(k[1:]) for k in res["variants"].get(name, {}).get("points", {})), default=0)
        pt = point(res, name, top)
        if cfg.HasField("dynamic_batching") and top >= 4 and pt and (pt.get("avg_batch") or 1) < 2:
            why = (f" The {shapes} distinct input shapes matter: Triton batches only requests of equal shape "
                   "(for inputs without allow_ragged_batch)." if shapes > 1 else "")  # fmt: skip
            add("small_batches", "warning", name,
                f"at concurrency {top} the dynamic batcher formed batches of {pt['avg_batch']:.2f} on average.{why}",
                "pad requests to a few fixed lengths on the client (bench.input_shapes=uniform measures that), "
                "or raise max_queue_delay (bench.tune=true)")  # fmt: skip
    out += _latency_findings(res)
    stable = [n for n in configs if point(res, n, 1)]
    for name, cfg in configs.items():
        p1 = res["variants"].get(name, {}).get("points", {}).get("c1")
        if p1 and not p1["valid"] and stable:
            # One variant stalls where another, on the same server binary and inputs, is stable: its config.
            hint = ""
            if cfg.dynamic_batching.HasField("default_queue_policy"):
                hint = (" It sets dynamic_batching.default_queue_policy (max_queue_size "
                        f"{cfg.dynamic_batching.default_queue_policy.max_queue_size}). Measured on MiniLM, 2 cores: that policy with "
                        "intra_op_thread_count 2 gave 50-190 ms stalls at concurrency 1; without it, or with 1 thread, "
                        "runs were stable")  # fmt: skip
            add("unstable_variant", "warning", name,
                f"no stable measurement at concurrency 1 while {', '.join(stable)} is stable on the same machine and inputs.{hint}",
                "read the per-window lines in the perf logs; try variants.<name>.dynamic_batching.max_queue_size=0")  # fmt: skip
    for name, v in res["variants"].items():
        bad = [k for k, p in v.get("points", {}).items() if not p["valid"]]
        if bad:
            add("invalid_measurement", "warning", name, f"no stable measurement at {', '.join(bad)} (not reported as numbers)",
                "raise bench.measurement_interval_ms or bench.stability_percentage; stop other load")  # fmt: skip
    return out


def _latency_findings(res: Result) -> list[dict]:
    """Where the latency variant's c=1 time goes, and whether it is within the limit of in-process ORT."""
    served, ort_p50, method = headline_c1(res)
    if method == "drifted":
        p = res["paired_c1"]
        return [{"rule": "machine_drift", "severity": "warning", "variant": "latency",
                 "message": f"no served/in-process ratio: {p['reason']}",
                 "fix": "re-run on a quiet machine, or raise bench.paired_rounds / bench.paired_max_drift"}]  # fmt: skip
    if not served or not ort_p50:
        return []
    client = served["avg_ms"] - served["server_ms"]
    around = served["server_queue_ms"] + served["server_compute_input_ms"] + served["server_compute_output_ms"]
    infer = served["server_compute_infer_ms"]
    cost = standin_cost_ms(served)
    if cost is not None:
        # execute() minus session.run is our Python (reading inputs, building pb_utils tensors); the rest is the
        # python backend's IPC to the stub process.
        py = served.get("standin_execute_ms", served["standin_ort_ms"]) - served["standin_ort_ms"]
        inside = (f"which is ONNX Runtime inside the stand-in {served['standin_ort_ms']:.2f} (mean; in-process p50 {ort_p50:.2f}) "
                  f"+ python backend {cost:.2f} ms (stand-in Python in execute {py:.2f} + IPC to the stub {cost - py:.2f}; "
                  "Triton's onnxruntime backend pays neither)")  # fmt: skip
    else:
        stand_in = {"python": " (embedded: python-backend IPC and Python)", "pipeline_ort": " (embedded: native pipeline_ort backend)"}.get(
            _standin(res), "")
        inside = f"which is in-process ORT p50 {ort_p50:.2f} + {infer - ort_p50:.2f} ms{stand_in}"
    breakdown = (f"served c=1 avg {served['avg_ms']:.2f} ms = client/HTTP {client:.2f} + server queue/input/output {around:.2f} "
                 f"+ compute infer {infer:.2f} ms, {inside}; pairing: {method}")  # fmt: skip
    out = [{"rule": "latency_breakdown", "severity": "info", "variant": "latency", "message": breakdown,
            "fix": "nothing to fix: where the time goes"}]  # fmt: skip
    ratio = served["p50_ms"] / ort_p50
    r = (res.get("ratios") or {}).get("latency_c1_p50_vs_ort_p50") or ratio
    if r > SERVED_VS_ORT_LIMIT:
        out.append({"rule": "serving_overhead", "severity": "warning", "variant": "latency",
                    "message": f"served p50 is {r:.2f}x the in-process ORT p50 (limit {SERVED_VS_ORT_LIMIT}x); {breakdown}",
                    "fix": "the largest term above is where to look; on a loaded machine re-run when it is idle"})  # fmt: skip
    return out


CURVE_FIELDS = ["concurrency", "p50_ms", "p95_ms", "p99_ms", "throughput_infer_s", "server_queue_ms", "server_compute_infer_ms", "avg_batch"]


def curves_csv(res: Result, variant: str) -> str:
    """Plot data for dvc plots: one row per valid concurrency point."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CURVE_FIELDS, lineterminator="\n")
    w.writeheader()
    for p in res["variants"][variant]["points"].values():
        if p["valid"]:
            w.writerow({k: (p.get(k) if p.get(k) is not None else "") for k in CURVE_FIELDS})
    return buf.getvalue()


def plot_png(res: Result, path: Path) -> None:
    """Throughput vs p99 per variant, with the in-process best as a reference line."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, v in res["variants"].items():
        pts = [p for p in v["points"].values() if p["valid"]]
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
    best = res["baseline"].get("throughput", {}).get("best_infer_s")
    if best:
        ax1.axhline(best, ls="--", c="gray", label=f"in-process ORT best ({best:.0f}/s)")
    ax1.set(xlabel="p99 latency (ms)", ylabel="inferences / s", title="throughput vs p99")
    ax2.set(ylabel="server time (ms)", title="server queue vs compute")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=7)
    mode = res["server"]["mode"]
    what = f"{_standin(res)} + ONNX Runtime stand-in, shipped scheduling config" if mode == "embedded" else "shipped repository"
    fig.suptitle(f"{res['model']['name']}: server mode {mode} ({what})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _standin(res: Result) -> str:
    """The embedded server's stand-in backend (reports written before the native backend only had python)."""
    if res["server"]["mode"] != "embedded":
        return ""
    return "pipeline_ort" if res["server"].get("backend") == "native" else "python"


def _f(x: float | None, fmt: str = ".2f", unit: str = "") -> str:
    return "n/a" if x is None else format(x, fmt) + unit


def _pairing(res: Result) -> str:
    p = res.get("paired_c1")
    if not p:
        return "unpaired: sweep c=1 point vs the faster of the start/end baselines"
    if p.get("ratio") is None:
        return f"paired, no round counted: {p['reason']}"
    # The p50s shown beside the ratio are medians of their own: with rounds in fast and slow phases their
    # quotient can differ from the median of the per-round ratios, which is the headline.
    counted = _counted(p, "paired rounds' ratios")
    return (f"each a median over the counted rounds; ratio: {counted}; "
            f"unpaired sweep ratio {_f(res['ratios'].get('latency_c1_p50_vs_ort_p50_unpaired'), unit='x')}")


def _counted(p: dict, rounds: str) -> str:
    """'median of N of M <rounds>, range lo-hix' for a summary of measure.bracketed_rounds with a ratio."""
    lo, hi = p["ratio_range"]
    return f"median of {p['counted_rounds']} of {len(p['rounds'])} {rounds}, range {lo:.2f}-{hi:.2f}x"


def _throughput_pairing(res: Result) -> str:
    parts = []
    for c in (8, 16):
        p, unpaired = paired_throughput(res, c), _f(res["ratios"].get(f"throughput_vs_latency_c{c}_unpaired"), unit="x")
        if not p:
            parts.append(f"c={c} unpaired: the sweep's points, measured minutes apart")
        elif p.get("ratio") is None:
            parts.append(f"c={c} paired, no round counted: {p['reason']}")
        else:
            parts.append(f"c={c}: {_counted(p, 'paired rounds')}, unpaired sweep ratio {unpaired}")
    return "; ".join(parts)


def _paired_throughput_table(res: Result) -> list[str]:
    pt = res.get("paired_throughput")
    if not pt:
        return []
    drift = next(iter(pt.values()))["max_drift"]
    lines = ["", "## Throughput vs latency variant, paired: one server holds both; in-process ORT best-batch throughput is timed "
             f"before, between and after the two runs (a round counts if all three agree within {drift:.0%}); order alternates", "",
             "| c | round | order | ORT best infer/s: before / between / after | latency infer/s | throughput infer/s | drift "
             "| throughput / latency | throughput / ORT best | p50 latency / throughput ms | counted |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip

    def tput(d: dict) -> str:
        return _f(d.get("throughput_infer_s"), ".1f") if d["valid"] else _invalid(d["reason"], 50)

    for key, p in pt.items():
        for r in p["rounds"]:
            lines.append(f"| {key[1:]} | {r['round']} | {' then '.join(r['order'])} | {_gauges(r['gauges'])} | "
                         f"{tput(r['latency'])} | {tput(r['throughput'])} | {r['drift']:.0%} | {_f(r['ratio'], unit='x')} | "
                         f"{_f(r['throughput_vs_ort_best'], unit='x')} | {_f(r['latency'].get('p50_ms'))} / {_f(r['throughput'].get('p50_ms'))} | "
                         f"{'yes' if r['counted'] else 'no'} |")  # fmt: skip
    return lines


def _tax_p50_text(res: Result) -> str:
    """The batching tax as a p50 difference: paired when c=1 rounds ran and one counted, else the sweep's."""
    r = res["ratios"]
    unpaired = f"{_f(r.get('batching_tax_c1_ms_unpaired'))} ms"
    if not paired_throughput(res, 1):
        return f"its p50 is {unpaired} above the latency variant's (unpaired sweep points)"
    if r["batching_tax_c1_ms"] is None:
        return f"no paired c=1 round counted, so no same-minute p50 difference (see machine_drift); unpaired sweep: {unpaired}"
    return f"its p50 is {_f(r['batching_tax_c1_ms'])} ms above the latency variant's (paired rounds, see below; unpaired sweep: {unpaired})"


def _gauges(gauges: list[float]) -> str:
    """A round's in-process gauges (infer/s) in the order they were timed, for a table cell."""
    return " / ".join(f"{g:.0f}" for g in gauges)


def _invalid(reason: str, keep: int) -> str:
    """A table cell for an invalid measurement: the end of perf_analyzer's reason, its pipes escaped for Markdown."""
    return "INVALID: " + reason[-keep:].replace("|", "\\|")


def _paired_table(res: Result) -> list[str]:
    p = res.get("paired_c1")
    if not p:
        return []
    inside = p.get("in_server_gauge")
    also = f" and the server's own time inside ORT during the run ({inside}, mean)" if inside else ""
    lines = ["", f"## Latency c=1 paired with in-process ORT (a round counts if its two ORT p50s{also} agree within {p['max_drift']:.0%})", "",
             "| round | ORT p50 before ms | served p50 ms | ORT in server ms | ORT p50 after ms | drift | ratio | counted |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in p["rounds"]:
        served = _f(r["served"].get("p50_ms")) if r["served_valid"] else _invalid(r["served_reason"], 60)
        lines.append(f"| {r['round']} | {r['ort_p50_ms_before']:.2f} | {served} | {_f(r.get('in_server_gauge'))} | {r['ort_p50_ms_after']:.2f} | "
                     f"{r['drift']:.0%} | {_f(r['ratio'], unit='x')} | {'yes' if r['counted'] else 'no'} |")  # fmt: skip
    return lines


def markdown(res: Result) -> str:
    """The human report: mode, machine, table, ratios, diagnosis."""
    r, m, s = res["ratios"], res["machine"], res["server"]
    lines = [
        f"# Benchmark: {res['model']['name']}",
        "",
        f"**Server mode: {s['mode']}.** {s['description']}",
        "",
        f"Machine: {m['cpu_model']}, {m['cores_available']} cores available (of {m['cpu_count']}); load average at start "
        f"{m['loadavg_start']}, at end {m.get('loadavg_end')}. Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".",
        f"Inputs: {res['inputs']['requests']} batch-1 requests from the model's samples ({res['inputs']['policy']}, "
        f"{res['inputs']['distinct_shapes']} distinct shapes).",
        "",
        "## Headline",
        "",
        f"- latency variant c=1 p50 / in-process ORT p50: **{_f(r['latency_c1_p50_vs_ort_p50'], unit='x')}** "
        f"({_f(r['latency_c1_p50_ms'])} ms vs {_f(r['ort_p50_ms'])} ms, {_pairing(res)}); "
        f"queue share {_f(r['latency_c1_queue_share'], '.1%')}"
        + (f"; without the python backend's measured cost: {_f(r['latency_c1_p50_vs_ort_p50_standin_removed'], unit='x')} "
           "(a lower bound for Triton's onnxruntime backend)" if r.get("latency_c1_p50_vs_ort_p50_standin_removed") else ""),
        f"- throughput / latency variant: c=8 **{_f(r['throughput_vs_latency_c8'], unit='x')}**, c=16 **{_f(r['throughput_vs_latency_c16'], unit='x')}** "
        f"({_throughput_pairing(res)})",
        f"- throughput variant / in-process best batch: c=8 {_f(r['throughput_vs_ort_best_c8'], unit='x')}, c=16 {_f(r['throughput_vs_ort_best_c16'], unit='x')}"
        + (f" (paired: in-process ORT at batch {res['baseline'].get('throughput', {}).get('best_batch')} timed around each round; "
           f"unpaired against the start baseline: c=8 {_f(r.get('throughput_vs_ort_best_c8_unpaired'), unit='x')}, "
           f"c=16 {_f(r.get('throughput_vs_ort_best_c16_unpaired'), unit='x')})" if res.get("paired_throughput") else ""),
        f"- batching tax at c=1: the throughput variant's requests wait {_f(r.get('throughput_c1_queue_ms'))} ms in Triton's queue "
        f"({_f(r['throughput_c1_queue_share'], '.1%')} of server time); {_tax_p50_text(res)}",
        "",
        "## Measurements (perf_analyzer, client-side percentiles; server split from --verbose-csv)",
        "",
        *(["The sweep measures one point after another, each variant in its own server: rows taken minutes apart are not "
           "comparable on a machine whose speed drifts. Variant against variant, and served against in-process, are in the "
           "paired tables below.", ""] if res.get("paired_throughput") or res.get("paired_c1") else []),
        "| variant | c | p50 ms | p95 ms | p99 ms | infer/s | queue ms | compute ms | queue share | avg batch | load 1m | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, v in res["variants"].items():
        for p in v["points"].values():
            if p["valid"]:
                comp = p["server_compute_input_ms"] + p["server_compute_infer_ms"] + p["server_compute_output_ms"]
                lines.append(
                    f"| {name} | {p['concurrency']} | {p['p50_ms']:.2f} | {p['p95_ms']:.2f} | {p['p99_ms']:.2f} | "
                    f"{p['throughput_infer_s']:.1f} | {p['server_queue_ms']:.2f} | {comp:.2f} | {p['queue_share']:.1%} | "
                    f"{_f(p.get('avg_batch'))} | {_f(p.get('loadavg_1m'))} | ok |"
                )
            else:
                lines.append(f"| {name} | {p['concurrency']} | - | - | - | - | - | - | - | - | - | {_invalid(p['reason'], 90)} |")
    b = res["baseline"]
    lat, thr = b.get("latency", {}), b.get("throughput", {})
    lines += [
        "",
        "## In-process ONNX Runtime baseline (same file, same inputs, same thread counts)",
        "",
        f"- batch 1: p50 {_f(lat.get('p50_ms'))} ms, p95 {_f(lat.get('p95_ms'))} ms, p99 {_f(lat.get('p99_ms'))} ms "
        f"over {lat.get('n')} runs after warmup; settings {lat.get('settings')} (measured before and after the sweep; "
        f"the faster is used, the other p50 was {_f(b.get('latency_after', {}).get('p50_ms'))} ms)",
        f"- best throughput {_f(thr.get('best_infer_s'), '.1f')} infer/s at batch {thr.get('best_batch')}; per batch: "
        + ", ".join(f"{k}: {v:.1f}" for k, v in thr.get("per_batch_infer_s", {}).items()),
    ]
    lines += _paired_table(res)
    lines += _paired_throughput_table(res)
    lines += [
        "",
        "## Diagnosis",
        "",
    ]
    lines += [f"- **{d['severity']}** `{d['rule']}` ({d['variant']}): {d['message']}. Fix: {d['fix']}." for d in res["diagnosis"]] or ["- nothing found"]
    if res.get("tuning"):
        t = res["tuning"]
        lines += ["", "## Tuning of the throughput variant", "",
                  f"Budget p99 <= {t['latency_budget_ms']} ms at concurrency {t['concurrency']}. Ranked by infer/s over in-process ORT "
                  f"best-batch infer/s timed before and after each candidate (the gauges); a candidate counts only if its gauges "
                  f"agree within {t['max_drift']:.0%}, else it is measured again.", ""]  # fmt: skip
        lines += ["| queue delay us | preferred | instances | p99 ms | infer/s | gauges infer/s | drift | vs in-process | avg batch | within budget | steady |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for c in t["candidates"]:
            steady = "yes" if c["steady"] else f"no ({c['rounds']} rounds)"
            lines.append(f"| {c['max_queue_delay_us']} | {c['preferred_batch_sizes']} | {c['instance_count']} | {_f(c.get('p99_ms'))} | "
                         f"{_f(c.get('throughput_infer_s'), '.1f')} | {_gauges(c['gauges'])} | {c['drift']:.0%} | {_f(c['vs_ort_best'], '#.3g', unit='x')} | "
                         f"{_f(c.get('avg_batch'))} | {'yes' if c['within_budget'] else 'no'} | {steady} |")  # fmt: skip
        lead = t.get("lead_over_next")
        ahead = f", {lead:.1%} ahead of the next candidate (one measurement each: a lead of a few percent may be noise)" if lead is not None else ""
        lines += ["", f"Chosen: {t.get('chosen')}{ahead}. Persist with: `{t.get('persist')}`"]
    lines += ["", "![throughput vs p99](bench.png)", ""]
    return "\n".join(lines)


def write_outputs(res: Result, out_dir: Path) -> None:
    """Report, plot and per-variant curves into ``out_dir`` (the caller makes it atomic)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "report.md", markdown(res))
    plot_png(res, out_dir / "bench.png")
