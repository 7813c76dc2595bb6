"""Diagnosis rules over the measurements and the shipped configs: one function per rule.

Each finding names its rule, what was measured and what to change, so a config tuned for the
wrong job (e.g. a queue delay on the latency path) cannot go unnoticed. :func:`diagnose` runs
them all, in the order the report lists them.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench.analysis.readiness import readiness_findings
from pipeline.stats.estimate import Estimate
from pipeline.bench.measure.results import Point
from pipeline.bench.analysis.ratios import headline_c1, standin_cost_ms
from pipeline.bench.results import BenchResult, Finding

SERVED_VS_ORT_LIMIT = 1.15  # issue 4: latency variant c=1 p50 at most this times in-process ORT p50
_BETTER_FIX = "tune it (dvc exp run -S tune.enabled=true) or check that requests can be batched (equal shapes, bench.input_shapes)"


def batching_tax(res: BenchResult, name: str, cfg: mc.ModelConfig, threshold: float, min_ms: float) -> Finding | None:
    """Queue wait at concurrency 1 above ``threshold`` of server time and above ``min_ms``."""
    p1 = res.point(name, 1)
    if not p1:
        return None
    m = p1.metrics
    if not (m["queue_share"] > threshold and m["server_queue_ms"] > min_ms):
        return None
    evidence = (
        f"at concurrency 1, {m['server_queue_ms']:.2f} ms of {m['server_ms']:.2f} ms server time "
        f"({m['queue_share']:.0%}) is queue wait (threshold {threshold:.0%}); p50 {m['p50_ms']:.2f} ms"
    )
    if not cfg.HasField("dynamic_batching"):
        # No batcher holds requests back, so a lone request waited for a busy CPU, not for company:
        # the machine's load, not the config, and it must not fail the stage.
        return Finding(
            "batching_tax",
            "warning",
            name,
            f"{evidence}, with no dynamic batching: the server waited for a CPU (1-minute load average {m.get('loadavg_1m', float('nan')):.1f})",
            "nothing to change in the config; the paired c=1 rounds next to in-process ORT carry the headline, and a quieter machine shrinks this",
        )
    # On the latency variant this is the failure it exists to prevent; on the throughput one it is the expected price.
    return Finding(
        "batching_tax",
        "error" if name == "latency" else "info",
        name,
        evidence,
        "remove dynamic_batching or set max_queue_delay_microseconds to 0 on the latency variant"
        if name == "latency"
        else "expected for a batching variant: send latency-bound traffic to the latency variant",
    )


def oversubscription(name: str, cfg: mc.ModelConfig, cores: int) -> Finding | None:
    """Instances x intra-op threads above the cores this process may use."""
    p = cfg.parameters
    intra = int(p["intra_op_thread_count"].string_value or 0) if "intra_op_thread_count" in p else 1
    threads = sum(g.count or 1 for g in cfg.instance_group) * max(1, intra)
    if threads <= cores:
        return None
    return Finding(
        "oversubscription",
        "warning",
        name,
        f"instances x intra_op threads = {threads} > {cores} cores available",
        "lower instance_group count or variants.<name>.intra_op_threads so the product fits the cores",
    )


def input_dtype(name: str, cfg: mc.ModelConfig, graph_dtypes: dict[str, str]) -> list[Finding]:
    """Config inputs whose data type is not the ONNX graph's."""
    out = []
    for i in cfg.input:
        want = graph_dtypes.get(i.name)
        have = mc.DataType.Name(i.data_type).removeprefix("TYPE_").lower()
        norm = {"fp32": "float32", "fp16": "float16", "fp64": "float64"}.get(have, have)
        if want and norm != want:
            out.append(
                Finding(
                    "input_dtype",
                    "error",
                    name,
                    f"config input '{i.name}' is {mc.DataType.Name(i.data_type)} but the model takes {want}",
                    "re-render the config from the ONNX graph (repository stage)",
                )
            )
    return out


def graph_level_off(name: str, cfg: mc.ModelConfig) -> Finding | None:
    """optimization.graph.level 2, which in Triton's ORT backend turns graph optimization off."""
    if not (cfg.HasField("optimization") and cfg.optimization.graph.level == 2):
        return None
    return Finding(
        "graph_level_off",
        "warning",
        name,
        "optimization.graph.level is 2, which turns ONNX Runtime graph optimization OFF",
        "set variants.<name>.graph_optimization_level=1 (Triton ORT: 1 = extended, 0 = all, 2 = off)",
    )


def throughput_not_better(res: BenchResult, c: int) -> Finding | None:
    """At c >= 4 the throughput variant gives no more infer/s than the latency variant.

    The rounds (both variants next to each other) outrank the sweep's points; the sweep is judged only when
    no throughput rounds ran at all: its points, of two servers minutes apart, flip either way. Below c=4
    there is too little concurrency to batch: the throughput variant is not expected to win.
    """
    if c < 4:
        return None
    pair = res.paired_throughput.get(c)
    if pair:
        e = pair.vs_latency()
        if e.value is None or e.value > 1:
            return None
        return Finding(
            "throughput_not_better",
            "warning",
            "throughput",
            f"at concurrency {c} the throughput variant gives {pair.infer_s('throughput'):.1f} infer/s, not more than the "
            f"latency variant's {pair.infer_s('latency'):.1f} (throughput / latency {e.text()})",
            _BETTER_FIX,
        )
    lat, thr = res.point("latency", c), res.point("throughput", c)
    if res.paired_throughput or not (lat and thr) or thr.metrics["throughput_infer_s"] > lat.metrics["throughput_infer_s"]:
        return None
    return Finding(
        "throughput_not_better",
        "warning",
        "throughput",
        f"at concurrency {c} the throughput variant gives {thr.metrics['throughput_infer_s']:.1f} infer/s, "
        f"not more than the latency variant's {lat.metrics['throughput_infer_s']:.1f}",
        _BETTER_FIX,
    )


_WIDE_FIX = (
    "re-run when the machine is quieter, or give the rounds more time (bench.rounds.c1.max, bench.rounds.throughput.max, bench.rounds.budget_s): more rounds narrow the interval"
)
_TOO_SHORT = "No valid requests recorded"  # perf_analyzer: no request ended inside a window, which is shorter than a request


def window_keys(res: BenchResult, source: str) -> str:
    """The settings that made the windows of points measured by ``source`` (``rounds`` or ``sweep``), with the values the
    run used (after the bench fitted them to the model: run.fit_windows)."""
    s = res.settings
    if source == "rounds":
        return (
            f"bench.rounds.measurement_interval_ms (the rounds' window: {s.rounds.measurement_interval_ms} ms in this run) "
            f"or bench.rounds.stability_percentage ({s.rounds.stability_percentage}%)"
        )
    return (
        f"bench.sweep.measurement_interval_ms (the sweep's window: {s.sweep.measurement_interval_ms} ms in this run) "
        f"or bench.sweep.stability_percentage ({s.sweep.stability_percentage}%)"
    )


def _too_short(points: list[Point]) -> bool:
    """Some invalid point had a window in which no request ended: the window, not the machine's drift, is why."""
    return any(_TOO_SHORT in p.reason for p in points if not p.valid)


def rounds_invalid(res: BenchResult, served: list[Point], variant: str, where: str) -> Finding | None:
    """No round gave a value because windows held no finished request: not drift (more rounds cannot help).

    None when the points built from these rounds already say it (default profile: :func:`invalid_measurement`,
    which names the same window), so the report says it once.
    """
    cs = {p.concurrency for p in served}
    if any(res.variants[v].source == "rounds" and not p.valid for v in res.variants for p in res.variants[v].points if p.concurrency in cs):
        return None
    bad = sum(not p.valid for p in served)
    return Finding(
        "invalid_measurement",
        "warning",
        variant,
        f"{where}: no round gave a value; {bad} of the rounds' {len(served)} perf_analyzer runs recorded no request "
        "inside a window (the window is shorter than the model's requests at that concurrency)",
        f"raise {window_keys(res, 'rounds')}",
    )


def _no_value_fix(res: BenchResult) -> str:
    """What to change when no round gave a value (unstable windows): the rounds' window, not their number."""
    return f"raise {window_keys(res, 'rounds')}, or re-run when the machine is quieter: no round gave a value, so more rounds cannot help"


def too_wide(e: Estimate, limit: float) -> str | None:
    """Why estimate ``e`` says nothing (no value, no interval, or an interval wider than +-``limit``), else None.

    "Too wide" is a half-width above bench.rounds.max_half_width (+-10% by default): wider, a 1.05x served/in-process ratio
    cannot be told from the 1.15x serving_overhead limit, nor a 10% throughput gain from none.
    """
    if e.value is None:
        return f"no round gave a value ({e.left_out} left out: an invalid perf_analyzer window or a failed burst)"
    if not e.has_interval:
        return f"{e.text()}: too few rounds for an interval"
    w = e.half_width or 0.0
    return f"{e.text()} is +-{w:.1%} wide, over the +-{limit:.0%} that can mean anything (bench.rounds.max_half_width)" if w > limit else None


def throughput_drift(res: BenchResult, c: int) -> Finding | None:
    """Throughput rounds ran at ``c`` and an interval of theirs is too wide (see :func:`too_wide`)."""
    pair = res.paired_throughput.get(c)
    if not pair:
        return None
    served = [p for r in pair.rounds for p in (r.latency, r.throughput)]
    if pair.vs_latency().value is None and _too_short(served):
        return rounds_invalid(res, served, "throughput", f"at concurrency {c}")
    limit = res.settings.rounds.max_half_width
    estimates = (("throughput / latency", pair.vs_latency()), ("throughput / in-process best batch", pair.vs_ort_best()))
    why = [f"{name} {w}" for name, e in estimates if (w := too_wide(e, limit))]
    if not why:
        return None
    fix = _no_value_fix(res) if any(e.value is None for _, e in estimates) else _WIDE_FIX
    return Finding("machine_drift", "warning", "throughput", f"at concurrency {c}: " + "; ".join(why) + f" ({pair.stopped})", fix)


def small_batches(res: BenchResult, name: str, cfg: mc.ModelConfig) -> Finding | None:
    """At the top concurrency (>= 4) the dynamic batcher formed batches of less than 2 on average."""
    sweep = res.variants.get(name)
    top = max((p.concurrency for p in sweep.points), default=0) if sweep else 0
    pt = res.point(name, top)
    if not (cfg.HasField("dynamic_batching") and top >= 4 and pt and (pt.avg_batch or 1) < 2):
        return None
    shapes = res.inputs.distinct_shapes
    why = f" The {shapes} distinct input shapes matter: Triton batches only requests of equal shape (for inputs without allow_ragged_batch)." if shapes > 1 else ""
    return Finding(
        "small_batches",
        "warning",
        name,
        f"at concurrency {top} the dynamic batcher formed batches of {pt.avg_batch:.2f} on average.{why}",
        "pad requests to a few fixed lengths on the client (bench.input_shapes=uniform measures that), or raise max_queue_delay (dvc exp run -S tune.enabled=true searches it)",
    )


def latency_drift(res: BenchResult) -> Finding | None:
    """c=1 rounds ran and the served/in-process interval is too wide (see :func:`too_wide`)."""
    pc = res.paired_c1
    if not pc:
        return None
    served = [p for r in pc.rounds for p in (r.latency, r.throughput) if p is not None]
    if pc.ratio().value is None and _too_short(served):
        return rounds_invalid(res, served, "latency", "served c=1 p50 / in-process ORT p50")
    why = too_wide(pc.ratio(), res.settings.rounds.max_half_width)
    if not why:
        return None
    fix = _no_value_fix(res) if pc.ratio().value is None and any(not p.valid for p in served) else _WIDE_FIX
    return Finding("machine_drift", "warning", "latency", f"served c=1 p50 / in-process ORT p50: {why} ({pc.stopped})", fix)


def _standin(res: BenchResult) -> str:
    """The embedded server's stand-in backend (reports written before the native backend only had python)."""
    if res.server.mode != "embedded":
        return ""
    return "pipeline_ort" if res.server.backend == "native" else "python"


def latency_breakdown(res: BenchResult) -> Finding | None:
    """Where the latency variant's served c=1 time goes: client, server queue/input/output, compute, and inside it ORT."""
    h = headline_c1(res)
    served, ort_p50 = h.served, h.ort_p50_ms
    if not served or not ort_p50:
        return None
    m = served.metrics
    client = m["avg_ms"] - m["server_ms"]
    around = m["server_queue_ms"] + m["server_compute_input_ms"] + m["server_compute_output_ms"]
    infer = m["server_compute_infer_ms"]
    cost = standin_cost_ms(served)
    if cost is not None:
        # execute() minus session.run is our Python (reading inputs, building pb_utils tensors); the rest is the
        # python backend's IPC to the stub process.
        py = m.get("standin_execute_ms", m["standin_ort_ms"]) - m["standin_ort_ms"]
        inside = (
            f"which is ONNX Runtime inside the stand-in {m['standin_ort_ms']:.2f} (mean; in-process p50 {ort_p50:.2f}) "
            f"+ python backend {cost:.2f} ms (stand-in Python in execute {py:.2f} + IPC to the stub {cost - py:.2f}; "
            "Triton's onnxruntime backend pays neither)"
        )
    else:
        stand_in = {"python": " (embedded: python-backend IPC and Python)", "pipeline_ort": " (embedded: native pipeline_ort backend)"}.get(_standin(res), "")
        inside = f"which is in-process ORT p50 {ort_p50:.2f} + {infer - ort_p50:.2f} ms{stand_in}"
    return Finding(
        "latency_breakdown",
        "info",
        "latency",
        f"served c=1 avg {m['avg_ms']:.2f} ms = client/HTTP {client:.2f} + server queue/input/output {around:.2f} + compute infer {infer:.2f} ms, {inside}; pairing: {h.method}",
        "nothing to fix: where the time goes",
    )


def serving_overhead(res: BenchResult, breakdown: Finding) -> Finding | None:
    """The served c=1 p50 above SERVED_VS_ORT_LIMIT times the in-process ORT p50 (the headline ratio when there is one)."""
    h = headline_c1(res)
    if not h.served or not h.ort_p50_ms:
        return None
    e = res.ratios.latency_c1 if res.ratios and res.ratios.latency_c1.value else Estimate(h.served.metrics["p50_ms"] / h.ort_p50_ms)
    if e.value is None or e.value <= SERVED_VS_ORT_LIMIT:
        return None
    return Finding(
        "serving_overhead",
        "warning",
        "latency",
        f"served p50 is {e.text()} the in-process ORT p50 (limit {SERVED_VS_ORT_LIMIT}x); {breakdown.message}",
        "the largest term above is where to look; on a loaded machine re-run when it is idle",
    )


def unstable_variant(res: BenchResult, name: str, cfg: mc.ModelConfig, stable: list[str]) -> Finding | None:
    """No stable c=1 measurement of ``name`` while the ``stable`` variants had one: its config, not the machine."""
    p1 = res.variants[name].at(1) if name in res.variants else None
    if not (p1 and not p1.valid and stable):
        return None
    hint = ""
    if cfg.dynamic_batching.HasField("default_queue_policy"):
        hint = (
            " It sets dynamic_batching.default_queue_policy (max_queue_size "
            f"{cfg.dynamic_batching.default_queue_policy.max_queue_size}). With that policy this Triton build's dynamic batcher "
            "stalls (MiniLM, 2 cores, concurrency 1, native stand-in: 1 s windows averaging 75-550 ms against 13-63 ms "
            "without it; the python stand-in stalls too), so it is the scheduler, not the stand-in"
        )
    return Finding(
        "unstable_variant",
        "warning",
        name,
        f"no stable measurement at concurrency 1 while {', '.join(stable)} is stable on the same machine and inputs.{hint}",
        "read the per-window lines in the perf logs; try variants.<name>.dynamic_batching.max_queue_size=0",
    )


def invalid_measurement(res: BenchResult, name: str) -> Finding | None:
    """Points of ``name`` without a stable measurement (the report shows no numbers for them); the fix names the
    window that measured them: the rounds' in the default profile, the sweep's where the sweep measured them."""
    sweep = res.variants[name]
    bad = [p for p in sweep.points if not p.valid]
    if not bad:
        return None
    short = " (perf_analyzer recorded no request inside a window: the window is shorter than the model's requests)" if _too_short(bad) else ""
    return Finding(
        "invalid_measurement",
        "warning",
        name,
        f"no stable measurement at {', '.join(f'c{p.concurrency}' for p in bad)} (not reported as numbers){short}",
        f"raise the window that measured them: {window_keys(res, sweep.source)}; stop other load",
    )


def diagnose(res: BenchResult, configs: dict[str, mc.ModelConfig], graph_dtypes: dict[str, str], cores: int, threshold: float, min_ms: float = 0.1) -> list[Finding]:
    """Every rule over ``res`` and the shipped ``configs``, in report order; each finding carries its evidence."""
    out: list[Finding | None] = []
    for name, cfg in configs.items():
        out += [batching_tax(res, name, cfg, threshold, min_ms), oversubscription(name, cfg, cores), *input_dtype(name, cfg, graph_dtypes), graph_level_off(name, cfg)]
    swept = {p.concurrency for s in res.variants.values() for p in s.points}
    for c in sorted(swept | set(res.paired_throughput)):
        out += [throughput_not_better(res, c), throughput_drift(res, c)]
    out += [small_batches(res, name, cfg) for name, cfg in configs.items()]
    breakdown = latency_breakdown(res)
    out += [latency_drift(res), breakdown, serving_overhead(res, breakdown) if breakdown else None]
    stable = [n for n in configs if res.point(n, 1)]
    out += [unstable_variant(res, name, cfg, stable) for name, cfg in configs.items()]
    out += [invalid_measurement(res, name) for name in res.variants]
    out += readiness_findings(res, configs)
    return [f for f in out if f is not None]
