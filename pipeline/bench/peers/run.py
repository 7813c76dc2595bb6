"""The side-by-side bench (bench.peers=[torchserve]): Triton and TorchServe on the same model, inputs and load.

One Triton server holds both variants (as in the headline rounds); two TorchServe servers hold the two deployments
(same graph: the shipped ONNX in ONNX Runtime, the server comparison; native: the PyTorch model in eager mode, the
runtime comparison), each with a model per mirrored schedule (deploy.py). All three run at once, idle while
another is measured. Order of work:

1. archives (torch-model-archiver), then each TorchServe server's start and each model's registration, timed: the cold
   starts (Triton's come from the bench's own cold start, fresh servers per variant);
2. every sample row to every deployment, answers held against Triton's within the parity tolerance of the shipped
   file's precision (a handler error shows here first, with the worker log);
3. rounds: at each concurrency, every deployment back to back (the order reversed every other round), so each ratio
   of the headline divides neighbours; median over rounds with a 90% interval, stopping as the Triton rounds stop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench.peers import deploy
from pipeline.bench.peers import serve
from pipeline.stats.estimate import StopRule, estimate
from pipeline.bench.measure.inputs import BenchInputs
from pipeline.bench.measure.results import Point
from pipeline.stats.ort import OrtSettings
from pipeline.bench.peers.results import Deployment, PeerRound, PeersResult, Ratio
from pipeline.bench.readiness.results import ColdStart
from pipeline.bench.progress import Progress
from pipeline.bench.measure.servers import EmbeddedMode, Target
from pipeline.bench.measure.sweep import Sweeper
from pipeline.core.config import BenchConfig, BenchProfile, PipelineConfig, Source, ToleranceConfig
from pipeline.core.errors import ModelSourceError, PipelineError
from pipeline.serving.embedded import ShippedModel
from pipeline.serving.memory import RssSampler
from pipeline.serving.torchserve import TorchServeInstall, locate_torchserve
from pipeline.serving.torchserve_process import TorchServeServer

VARIANTS = ("latency", "throughput")
KINDS = {"same_graph": "TorchServe same graph", "native": "TorchServe native"}
SETTINGS = [
    "token authorization off (TorchServe 0.12 turns it on; the bench and perf_analyzer send no key)",
    "the model API on, so models are registered through the management API with the mirrored batch_size, max_batch_delay and workers",
    "logging at WARN with no access log (its default writes several lines per request; Triton's embedded server writes none)",
    "system metrics off (by default a Python collector process starts every minute); metrics in Prometheus form",
    "OMP_WAIT_POLICY=PASSIVE for the workers: with GNU OpenMP's default spin-wait, PyTorch's intra-op threads ran an order of "
    "magnitude slower whenever other work held the cores. ONNX Runtime's own thread pools (Triton's and the same graph's) keep "
    "their default spinning, which a busy machine also penalizes: there the runtime comparison leans towards PyTorch",
]
# The workers' environment (see SETTINGS).
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def check() -> TorchServeInstall:
    """TorchServe, its archiver and Java, before any server starts (the stage fails at once when one is missing)."""
    return locate_torchserve()


def tolerance(cfg: PipelineConfig) -> ToleranceConfig:
    """The parity tolerance of the shipped file's precision (fp32 for a CPU target): answers are held to Triton's by it.
    ``precision=auto`` is decided later, by the choose stage: its answers are judged by fp32's, the strictest."""
    return getattr(cfg.parity, str(cfg.serving.precision), cfg.parity.fp32)


def expected_seconds(b: BenchConfig) -> float:
    """A first guess of the side by side's length for the ETA: archives and registrations, then the minimum rounds."""
    run = 3 * b.rounds.measurement_interval_ms / 1000 + 1.5
    return 60.0 + b.rounds.peers.min * len(levels(b)) * 6 * run


def levels(b: BenchConfig) -> list[int]:
    """The bench's concurrency levels: the rounds' (1 and bench.rounds.throughput.concurrency), or the full profile's sweep."""
    return sorted(set(b.sweep.concurrency)) if b.profile == BenchProfile.full else sorted({1, *b.rounds.throughput.concurrency})


def _triton(variant: str, model: str, cold: list[ColdStart], cfg: mc.ModelConfig, backend: str) -> Deployment:
    """A Triton variant as a row of the side by side; its cold start is the bench's own (a fresh server per variant)."""
    ours = [c for c in cold if c.variant == variant and not c.error]
    pick = next((c for c in ours if c.warmup), None) or next(iter(ours), None)  # as shipped: with its warmup when it has one
    how = f"the bench's cold start: a fresh tritonserver, the variant loaded {'with' if pick.warmup else 'without'} its model_warmup" if pick else ""
    s = OrtSettings.from_config(cfg)
    standin = "pipeline_ort (C++, inside tritonserver)" if backend == "native" else "a python-backend model (ORT in the stub)"
    runtime = (
        f"ONNX Runtime via {standin} on the shipped file (intra-op {s.intra_op_threads or 'default'}, inter-op "
        f"{s.inter_op_threads or 'default'}, graph level {s.graph_level}; {deploy.instances(cfg)} instance(s))"
    )
    return Deployment(f"triton_{variant}", f"Triton {variant}", "triton", "triton", variant, model, runtime, "triton", cold=pick, cold_source=how)


def ratios(res: PeersResult) -> list[Ratio]:
    """The headline pairs per concurrency, each a median over rounds of neighbouring runs (> 1: the first-named wins)."""
    d = res.deployments
    out = []
    for c in res.concurrency:
        v = "latency" if c == 1 else "throughput"
        metric = "p50_ms" if c == 1 else "throughput_infer_s"
        pairs = [
            (f"triton_vs_torchserve_same_graph_c{c}", f"triton_{v}", f"torchserve_same_graph_{v}", "the server comparison"),
            (f"triton_vs_torchserve_native_c{c}", f"triton_{v}", f"torchserve_native_{v}", "Triton's stack against TorchServe's as shipped"),
            (f"onnxruntime_vs_pytorch_in_torchserve_c{c}", f"torchserve_same_graph_{v}", f"torchserve_native_{v}", "the runtime comparison"),
        ]
        for name, num, den, what in pairs:
            if num not in d or den not in d:
                continue
            vals = [_ratio(r, num, den, metric) for r in res.rounds if r.concurrency == c]
            word = "p50 ratio (the other's p50 / its p50)" if c == 1 else "infer/s ratio"
            meaning = f"{d[num].label} against {d[den].label}, {word} at c={c}: {what}; > 1: {d[num].label} is faster"
            out.append(Ratio(name, c, metric, num, den, meaning, estimate(vals)))
    return out


def _ratio(r: PeerRound, num: str, den: str, metric: str) -> float | None:
    a, b = r.points.get(num), r.points.get(den)
    if not (a and b and a.valid and b.valid and a.metrics.get(metric) and b.metrics.get(metric)):
        return None
    x, y = a.metrics[metric], b.metrics[metric]
    return y / x if metric == "p50_ms" else x / y  # a latency ratio is a speedup: the other's p50 over its own


def order(keys: list[str], c: int, i: int) -> list[str]:
    """Run order at concurrency ``c`` in round ``i``: the schedule that matters at ``c`` first (latency at c=1, throughput
    above), Triton next to TorchServe same graph next to native; reversed every other round, so drift favours neither."""
    first = "latency" if c == 1 else "throughput"
    rank = {"triton": 0, "same_graph": 1, "native": 2}
    main = sorted((k for k in keys if k.endswith(first)), key=lambda k: rank[_kind(k)])
    rest = sorted((k for k in keys if not k.endswith(first)), key=lambda k: -rank[_kind(k)])
    seq = main + rest
    return seq if i % 2 == 0 else seq[::-1]


def _kind(key: str) -> str:
    return "triton" if key.startswith("triton") else key.split("_", 1)[1].rsplit("_", 1)[0]


@dataclass
class Prepared:
    """What the side by side serves, built before any server starts: TorchServe, the archives, the request bodies,
    and the shipped configs and request rows they were built from."""

    inst: TorchServeInstall
    work: Path
    archives: list[deploy.Archive]
    input_json: Path  # perf_analyzer's --input-data for TorchServe (one body file per request row)
    configs: dict[str, mc.ModelConfig]
    inp: BenchInputs
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Side:
    """What the steps of one side by side share: what they read (settings, the prepared deployments, where logs go)
    and what they fill in (the result, the targets the rounds measure, the RSS samplers)."""

    b: BenchConfig
    prep: Prepared
    tol: ToleranceConfig
    logs: Path
    progress: Progress
    res: PeersResult
    targets: dict[str, Target | serve.TsTarget] = field(default_factory=dict)
    samplers: dict[str, RssSampler] = field(default_factory=dict)


def prepare(
    cfg: PipelineConfig, inst: TorchServeInstall, shipped: ShippedModel, configs: dict[str, mc.ModelConfig], inp: BenchInputs, work: Path, log: Callable[[str], None]
) -> Prepared:
    """Every deployment's .mar in ``work/store`` and the request bodies; a native deployment needs a PyTorch model.

    Raises:
        ToolError: torch-model-archiver failed (its message and the fix).
    """
    store, archives, notes = work / "store", [], []
    variants = [v for v in VARIANTS if v in configs]
    for v in variants:
        archives.append(deploy.same_graph(inst, f"{shipped.name}_same_graph_{v}", v, shipped.onnx_for(v), configs[v], inp.graph_dtypes, work, store))
    if cfg.model.source != Source.factory:
        notes.append(f"TorchServe native not measured: model.source={cfg.model.source} has no PyTorch model to serve")
    else:
        for v in variants:
            try:
                archives.append(deploy.native(inst, f"{shipped.name}_native_{v}", v, cfg.model, configs[v], inp.graph_dtypes, work, store))
            except ModelSourceError as e:
                notes.append(f"TorchServe native ({v}) not measured: {e.what}")
    log(f"[bench] peers: {len(archives)} TorchServe archives built ({', '.join(a.name for a in archives)})")
    input_json = deploy.input_data(deploy.bodies(inp.rows, work / "bodies"), work / "torchserve_input.json")
    return Prepared(inst, work, archives, input_json, configs, inp, notes)


def measure(cfg: PipelineConfig, prep: Prepared, mode: EmbeddedMode, sweeper: Sweeper, cold: list[ColdStart], logs: Path, progress: Progress) -> PeersResult:
    """The side by side; a TorchServe deployment that fails is recorded with why (and its worker log), the rest is measured.
    ``cold``: the bench's own cold starts (Triton's row); answers are held to Triton's by :func:`tolerance`.

    Raises:
        PipelineError: the Triton side cannot be served.
    """
    b, t_start, inst, configs, inp = cfg.bench, time.monotonic(), prep.inst, prep.configs, prep.inp
    res = PeersResult(
        [str(p) for p in b.peers],
        levels(b),
        versions={"torchserve": inst.version, "java": f"{inst.java_version} ({inst.java_source})"},
        settings=list(SETTINGS),
        notes=list(prep.notes),
    )
    variants = [v for v in VARIANTS if v in configs]
    side = _Side(b, prep, tolerance(cfg), logs, progress, res)
    progress.phase("peers")
    with contextlib.ExitStack() as stack:
        triton = stack.enter_context(mode.serve_together(variants))
        for v in variants:
            res.deployments[f"triton_{v}"] = _triton(v, triton[v].model, cold, configs[v], mode.backend)
            side.targets[f"triton_{v}"] = triton[v]
        if (memory := triton[variants[0]].memory) is not None:
            side.samplers["triton"] = memory
        reference = serve.triton_answers(triton[variants[0]], inp.rows, [o.name for o in configs[variants[0]].output])
        for kind in KINDS:
            mine = [a for a in prep.archives if a.kind == kind]
            if mine:
                _serve_kind(side, stack, kind, mine, reference)
        if any(isinstance(t, serve.TsTarget) for t in side.targets.values()):
            _rounds(side, sweeper)
        else:
            res.notes.append("no TorchServe deployment answered: nothing to compare (see each deployment's error)")
        for label, mem in side.samplers.items():
            w = mem.window(t_start, time.monotonic())
            res.rss[label] = {"rss_peak_mb": w.peak_mb, "rss_median_mb": w.median_mb} if w else {}
    res.ratios = ratios(res)
    res.payload = payload(inp, reference, prep.input_json, res)
    res.seconds = round(time.monotonic() - t_start, 1)
    return res


def payload(inp: BenchInputs, reference: list, input_json: Path, res: PeersResult) -> dict[str, float]:
    """Mean bytes per request and per answer on each protocol: Triton's tensors, TorchServe's JSON bodies."""
    import json

    import numpy as np

    files = [Path(s["TORCHSERVE_INPUT"][0]) for s in json.loads(input_json.read_text())["data"]]
    out = {
        "triton_request_bytes": float(np.mean([sum(a.nbytes for a in r.values()) for r in inp.rows])),
        "triton_response_bytes": float(np.mean([sum(a.nbytes for a in r.values()) for r in reference])) if reference else 0.0,
        "torchserve_body_bytes": float(np.mean([f.stat().st_size for f in files])),
    }
    answered = [d.agreement.response_bytes for d in res.deployments.values() if d.agreement and d.agreement.response_bytes]
    if answered:
        out["torchserve_response_bytes"] = float(np.mean(answered))
    return {k: round(v, 1) for k, v in out.items()}


def _serve_kind(side: _Side, stack: contextlib.ExitStack, kind: str, archives: list[deploy.Archive], reference: list) -> None:
    """One TorchServe server for ``kind`` (in ``stack``): start it, register each schedule (cold start), check its answers
    against Triton's (``reference``)."""
    b, inst, configs, inp, res, progress = side.b, side.prep.inst, side.prep.configs, side.prep.inp, side.res, side.progress
    label = f"torchserve_{kind}"
    progress.at(f"{label} start")
    paths = sorted({p for a in archives for p in a.pythonpath})
    srv = stack.enter_context(TorchServeServer(inst, side.prep.work / "store", side.logs, b.server_timeout_s, label=label, pythonpath=paths, env=WORKER_ENV))
    pid = srv.java_pid()
    mem = stack.enter_context(RssSampler(pid, b.readiness.memory_sample_ms / 1000)) if pid else None
    if mem is not None:
        side.samplers[label] = mem
    for a in archives:
        key = f"{label}_{a.variant}"
        sched = deploy.mirror(configs[a.variant])
        dep = Deployment(key, f"{KINDS[kind]} ({a.variant})", "torchserve", kind, a.variant, a.name, a.runtime, label, sched)
        res.deployments[key] = dep
        t = serve.TsTarget(srv, a.name, mem)
        progress.at(f"{key} registration")
        dep.cold_source = serve.COLD_SOURCE
        try:
            dep.cold = serve.cold_start(
                t, f"{a.name}.mar", sched.batch_size, sched.max_batch_delay_ms, sched.workers, inp.rows[0], b.readiness.cold_start_requests, b.server_timeout_s
            )
        except PipelineError as e:
            dep.error, dep.log_excerpt = e.what, srv.log_excerpt()
            continue
        dep.agreement = serve.agreement(t, inp.rows, reference, side.tol)
        if dep.agreement.failed:
            dep.log_excerpt = srv.log_excerpt()
        if dep.agreement.failed == dep.agreement.rows:
            dep.error = f"every one of {dep.agreement.rows} requests failed ({dep.agreement.first_error})"
            continue
        side.targets[key] = t
        progress.log(
            f"[bench] {key}: registered in {dep.cold.load_s:.2f} s, first request {dep.cold.first_ms} ms vs warm p50 "
            f"{dep.cold.warm_p50_ms} ms; answers {'agree with' if dep.agreement.passed else 'DIFFER from'} Triton's"
        )


def window_ms(res: PeersResult, b: BenchConfig) -> int:
    """One perf_analyzer window for every deployment: bench.rounds.measurement_interval_ms, longer when the slowest
    warm request (its cold start's warm p50) would leave fewer than 20 requests in it (at most 5 s)."""
    slowest = max((d.cold.warm_p50_ms for d in res.deployments.values() if d.cold and d.cold.warm_p50_ms), default=0.0)
    return int(min(max(b.rounds.measurement_interval_ms, 20 * slowest), max(5000, b.rounds.measurement_interval_ms)))


def _rounds(side: _Side, sweeper: Sweeper) -> None:
    """Every deployment at every level, back to back, until the ratios' intervals are narrow (or the budget is spent)."""
    b, res, targets, progress = side.b, side.res, side.targets, side.progress
    keys = list(targets)
    res.window_ms = window_ms(res, b)

    def run(key: str, c: int, tag: str) -> Point:
        t = targets[key]
        if isinstance(t, serve.TsTarget):
            p = serve.perf_run(sweeper.pa, t, c, side.prep.input_json, side.logs, tag, b, res.window_ms)
            progress.log(f"[bench] {tag} c={c}: " + (f"p50 {p.metrics['p50_ms']:.2f} ms, {p.metrics['throughput_infer_s']:.1f} infer/s" if p.valid else f"INVALID ({p.reason})"))
            return p
        return sweeper.run(t, [c], tag, res.window_ms, b.rounds.stability_percentage)[0]

    for k in keys:  # a fresh model's first run pays first-request costs (allocations for each batch shape): discarded
        run(k, max(res.concurrency), f"peers_warmup_{k}")
    rule = StopRule(
        b.rounds.peers.min,
        b.rounds.peers.max,
        b.rounds.target_half_width if b.profile == BenchProfile.default else None,
        b.rounds.peers.budget_s if b.profile == BenchProfile.default else None,
        "bench.rounds.peers.max",
        "bench.rounds.peers.budget_s",
    )
    t0, i = time.monotonic(), 0
    while True:
        ests = [r.estimate for r in ratios(res)]
        why = rule.reason(i, ests, time.monotonic() - t0)
        if why is not None:
            res.stopped = why
            return
        for c in res.concurrency:
            progress.at(f"peers c={c}", f"round {i + 1}/<={b.rounds.peers.max}")
            seq = order(keys, c, i)
            res.rounds.append(PeerRound(i, c, seq, {k: run(k, c, f"peers_round{i}_{k}") for k in seq}))
        i += 1
