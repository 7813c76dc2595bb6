"""The bench run end to end: perf_analyzer against a real Triton, with an in-process ONNX Runtime baseline.

For every shipped variant (configs/<variant>.pbtxt) it sweeps bench.sweep.concurrency with real
sample inputs, records client percentiles, throughput, the server's queue/compute split and
the batch size actually formed; beside it, ORT timed in this process on the same ONNX file,
inputs and thread counts. The headline ratios are measured in paired rounds (served runs
bracketed by in-process timings, see rounds/pairing.py), because this VM's speed drifts within a
minute. Writes bench.json (dvc metrics), per-variant curves (dvc plots), a markdown report
with a PNG, and a diagnosis. The steps: inputs, baseline, sweep per variant, pairing, outputs; each
is a function below. The throughput variant's scheduling is the tune stage's (pipeline/tune), before the repository.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench.measure import inputs as inputs_mod
from pipeline.bench.peers import run as peers_mod
from pipeline.bench import text as text_mod
from pipeline.bench.readiness import run as readiness
from pipeline.bench.report import render
from pipeline.bench.measure.baseline import Gauges, baseline_latency, baseline_throughput
from pipeline.bench.analysis.diagnose import diagnose
from pipeline.bench.measure.inputs import BenchInputs
from pipeline.bench.measure.inserver import WARM_RUNS
from pipeline.bench.measure.machine import cpu_budget, loadavg, machine
from pipeline.bench.measure.results import Baseline, Sweep, fitted_window_ms
from pipeline.stats.ort import OrtSettings
from pipeline.bench.rounds.run import RoundsPlan, measure_rounds
from pipeline.bench.progress import Progress
from pipeline.bench.analysis.ratios import ratios
from pipeline.bench.results import BenchResult, ServerInfo
from pipeline.records.bench import MeasuredModel
from pipeline.bench.rounds.results import C1Rounds, ThroughputRounds, sweep_from_rounds
from pipeline.bench.peers.results import PeersResult
from pipeline.bench.readiness.results import Production
from pipeline.bench.measure.servers import EmbeddedMode, ExternalMode, Mode, Target
from pipeline.bench.measure.sweep import Sweeper, check_readiness
from pipeline.core import samples
from pipeline.core.atomic import atomic_path, file_digest, remove_stale, write_json, write_text
from pipeline.core.config import BenchConfig, BenchProfile, BenchServer, PipelineConfig
from pipeline.core.errors import BenchError, PipelineError
from pipeline.records.tune import TuneRecord, read_tune
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.embedded import ShippedModel, find_shipped, read_config
from pipeline.serving.torchserve import TorchServeInstall


def run_bench(cfg: PipelineConfig, repository: Path, out_json: Path, out_dir: Path, curves_dir: Path, sentences: Path | None = None, tune: Path | None = None) -> BenchResult:
    """Benchmark the shipped model ``repository/<model.name>``; write every output; return the result.

    ``sentences`` (one per line): what the text endpoint ``<model.name>_text`` is measured with, when it ships.
    ``tune`` (tune.json): the tune stage's record, embedded when it was searched on the throughput file measured here.

    The config was checked when it was composed (pipeline.core.config); only what the built
    repository holds is checked here.

    Raises:
        BenchError / ToolError / ConfigError with the fix, when anything cannot be measured.
    """
    b = cfg.bench
    remove_stale(out_json, out_dir, curves_dir)  # a failed run must not leave the last run's numbers behind
    pa = pa_mod.locate_perf_analyzer()  # fail before starting any server
    ts_inst = peers_mod.check() if b.peers else None  # so do TorchServe and its Java (bench.peers)
    shipped, configs = shipped_configs(repository / cfg.model.name)
    main_cfg = main_config(configs)
    inp = inputs_mod.prepare(cfg.model, shipped.onnx, main_cfg, b.input_shapes)
    mach = machine(pa)
    model = measured_model(shipped)
    plan = RoundsPlan.of(b, list(configs))
    t_start = time.monotonic()  # the time base of the RSS traces
    with Progress(expected_seconds(b, plan)) as progress:
        run = Run(cfg, shipped, configs, inp, plan, progress)
        run, base, gauges = measure_baseline(run)
        with tempfile.TemporaryDirectory(prefix="bench-work-") as work_s:
            served = measure_served(run, pa, ts_inst, gauges, Path(work_s), t_start)
            text = measure_text(run, repository, sentences, pa, Path(work_s) / "text")
            progress.phase("report")
            b = run.cfg.bench
            baseline_again(base, shipped.onnx_for("latency"), OrtSettings.from_config(main_cfg), inp, b)
            mach.loadavg_end = loadavg()
            res = BenchResult(mach, model, inp.info, b, base, served.server, served.variants, served.pc1, served.pairs, production=served.production, peers=served.peers, text=text)
            res.tune = tune_of(tune, model, progress.log)
            res.ratios = ratios(res)
            res.diagnosis = diagnose(res, configs, inp.graph_dtypes, cpu_budget(), b.queue.share_threshold, b.queue.min_ms)
            write_outputs(res, shipped, served.logs, out_dir, curves_dir)
    write_json(out_json, res.to_json())
    if served.production.soak is not None and served.production.soak.partial:
        raise KeyboardInterrupt  # the soak was interrupted: its partial data is written (marked partial), now stop as asked
    return res


@dataclass(frozen=True)
class Run:
    """What every step of a bench run reads: the config (its windows fitted once the baseline ran), the shipped model
    and its variants' configs, the request rows, the plan of the rounds, and the progress line."""

    cfg: PipelineConfig
    shipped: ShippedModel
    configs: dict[str, mc.ModelConfig]
    inp: BenchInputs
    plan: RoundsPlan
    progress: Progress


@dataclass
class Served:
    """What the servers measured: the sweeps, the rounds, readiness and the side by side, and their logs."""

    server: ServerInfo
    variants: dict[str, Sweep]
    pc1: C1Rounds | None
    pairs: dict[int, ThroughputRounds]
    production: Production
    peers: PeersResult | None
    logs: Path


def measure_baseline(run: Run) -> tuple[Run, Baseline, Gauges]:
    """The in-process baseline on each variant's own file and settings (the latency side on the latency variant's, best
    batch on the throughput one's); the run with its measurement windows fitted to the model; the in-process gauges."""
    b, inp, progress, shipped, configs = run.cfg.bench, run.inp, run.progress, run.shipped, run.configs
    main_cfg = main_config(configs)
    lat_s, thr_s = OrtSettings.from_config(main_cfg), OrtSettings.from_config(configs.get("throughput", main_cfg))
    progress.phase("baseline")
    lat_onnx, thr_onnx = shipped.onnx_for("latency"), shipped.onnx_for("throughput")
    files = lat_onnx.name if lat_onnx == thr_onnx else f"{lat_onnx.name} (latency) and {thr_onnx.name} (throughput)"
    progress.log(f"[bench] in-process ONNX Runtime baseline on {files}; profile {b.profile}")
    base = Baseline(
        baseline_latency(lat_onnx, lat_s, inp.rows, b.baseline.warmup_runs, b.baseline.runs),
        baseline_throughput(thr_onnx, thr_s, inp.rows, b.baseline.batch_sizes, b.baseline.seconds),
    )
    b = fit_windows(b, base, progress.log)
    run = replace(run, cfg=replace(run.cfg, bench=b))
    progress.expect(expected_seconds(b, run.plan, base.latency.p50_ms))  # the fitted windows, priced at the model's latency
    # The in-process side of the rounds: the served variant's settings, timed like the baseline.
    gauges = Gauges((lat_onnx, thr_onnx), lat_s, thr_s, inp.rows, base.throughput.best_batch, b.baseline.warmup_runs, b.baseline.runs, b.rounds.measurement_interval_ms / 1000)
    return run, base, gauges


def measure_text(run: Run, repository: Path, sentences: Path | None, pa: pa_mod.PerfAnalyzer, work: Path) -> text_mod.TextEndpointResult | None:
    """The text endpoint, when the repository ships one and the bench serves it here (embedded, bench.text.enabled)."""
    b, progress = run.cfg.bench, run.progress
    if not (repository / (run.cfg.model.name + text_mod.SUFFIX)).is_dir() or not b.text.enabled or sentences is None:
        return None
    if b.server != BenchServer.embedded:
        progress.log("[bench] text endpoint not measured: bench.server=external measures the tensor model only")
        return None
    progress.phase("text endpoint")
    try:
        return text_mod.measure(
            run.cfg, repository, run.shipped.onnx_for("latency"), OrtSettings.from_config(main_config(run.configs)), samples.read_sentences(sentences), pa, work, progress.log
        )
    except PipelineError as e:
        raise _keeping_logs(e, work / "logs") from None


def measure_served(run: Run, pa: pa_mod.PerfAnalyzer, ts_inst: TorchServeInstall | None, gauges: Gauges, work: Path, t_start: float) -> Served:
    """Everything measured on a server, in ``work``: cold start, the sweep, the rounds (with overload and soak on their
    server), the side by side. A failure names a copy of the logs (:func:`_keeping_logs`).

    Raises:
        PipelineError: whatever a measurement raised, with ``logs kept in`` among its details.
    """
    b, inp, progress = run.cfg.bench, run.inp, run.progress
    logs = work / "logs"
    logs.mkdir()
    input_json = pa_mod.write_input_data(work / "perf_input.json", inp.rows, inp.batched)
    # The peers' archives before any server: an archive that does not build stops the stage here.
    prep = peers_mod.prepare(run.cfg, ts_inst, run.shipped, run.configs, inp, work / "peers", progress.log) if ts_inst else None
    sweeper = Sweeper(pa, b, input_json, inp.shapes, logs, inp.rows[0], progress.log)
    shipped = run.shipped
    mode: Mode = (
        EmbeddedMode(shipped.model_dir, b.protocol, b.server_timeout_s, logs, b.embedded_backend, b.readiness.memory_sample_ms / 1000)
        if b.server == BenchServer.embedded
        else ExternalMode(b.url or "", shipped.name, shipped.configs, b.protocol, b.metrics_url)  # bench.url: bench.protocol's endpoint
    )
    prod = readiness.record(mode)
    try:
        return _serve(run, mode, sweeper, gauges, prep, prod, logs)
    except PipelineError as e:
        raise _keeping_logs(e, logs) from None
    finally:
        readiness.finish(prod, mode, t_start)
        mode.close()


def _serve(run: Run, mode: Mode, sweeper: Sweeper, gauges: Gauges, prep: peers_mod.Prepared | None, prod: Production, logs: Path) -> Served:
    """The measurements of :func:`measure_served`, in order, on ``mode``'s servers; readiness fills in ``prod``."""
    b, inp, progress, configs = run.cfg.bench, run.inp, run.progress, run.configs
    server = server_info(mode)
    readiness.cold(prod, mode, b, inp, list(configs), logs, progress)
    variants = sweep_variants(mode, sweeper, b, run.plan.swept, server, progress)

    def then(embedded: EmbeddedMode, ts: dict[str, Target], pairs: dict[int, ThroughputRounds]) -> None:  # on the rounds' server, after them
        readiness.after_rounds(prod, embedded, sweeper, ts, readiness.capacity(pairs, variants), inp, progress)

    pc1, pairs = measure_rounds(mode, sweeper, gauges, b, run.plan, inp, progress, then)
    from_rounds = sweep_from_rounds(pc1, pairs)
    variants = {v: variants[v] if v in variants else from_rounds[v] for v in configs if v in variants or v in from_rounds}
    # One variant without a valid point is a finding for the report; none at all is a failure.
    check_readiness([p for s in variants.values() for p in s.points], "any variant")
    side = None
    # bench.peers composes only with bench.server=embedded (pipeline.core.config).
    if prep is not None:
        assert isinstance(mode, EmbeddedMode)
        side = peers_mod.measure(run.cfg, prep, mode, sweeper, prod.cold_start, logs, progress)
    return Served(server, variants, pc1, pairs, prod, side, logs)


def fit_windows(b: BenchConfig, base: Baseline, log: Callable[[str], None]) -> BenchConfig:
    """``b`` with both measurement windows fitted to the model (:func:`fitted_window_ms`); the change is logged, and
    the report's config records the windows that were used."""
    top = max([1, *b.sweep.concurrency, *b.rounds.throughput.concurrency])
    sweep, rounds = fitted_window_ms(base, b.sweep.measurement_interval_ms, top), fitted_window_ms(base, b.rounds.measurement_interval_ms, top)
    if (sweep, rounds) == (b.sweep.measurement_interval_ms, b.rounds.measurement_interval_ms):
        return b
    log(
        f"[bench] measurement windows fitted to the model (>= 4 of its request latencies at c={top}, from the in-process baseline): "
        f"bench.sweep.measurement_interval_ms {b.sweep.measurement_interval_ms} -> {sweep} ms, "
        f"bench.rounds.measurement_interval_ms {b.rounds.measurement_interval_ms} -> {rounds} ms"
    )
    return replace(b, sweep=replace(b.sweep, measurement_interval_ms=sweep), rounds=replace(b.rounds, measurement_interval_ms=rounds))


def expected_seconds(b: BenchConfig, plan: RoundsPlan, p50_ms: float = 0.0) -> dict[str, float]:
    """A guess of each phase's length for the ETA (the rounds refine theirs as they go); ``p50_ms``, the model's in-process
    batch-1 latency once the baseline measured it, prices what runs per request (bursts, warm-up runs, a run's tail)."""
    req = p50_ms / 1000
    run = 3 * b.rounds.measurement_interval_ms / 1000 + 1.0 + 2 * req  # a round's perf_analyzer run: its start, three windows, its tail
    burst = max(b.rounds.alternation_ms / 1000, (WARM_RUNS + 3) * req)  # at least WARM_RUNS untimed and 3 timed requests a side
    c1 = (1 + plan.c1_throughput) * run + b.rounds.alternations * 2 * burst
    tput = 2 * run + b.rounds.measurement_interval_ms / 1000 + 3 * req
    per_round = c1 * plan.c1 + tput * len(plan.concurrency)
    most = max(b.rounds.c1.max, b.rounds.throughput.max) * per_round
    least = max(b.rounds.c1.min, b.rounds.throughput.min) * per_round  # the budget stops rounds only after their minimum
    rounds = most if b.profile == BenchProfile.full else min(most, max(least, b.rounds.budget_s + per_round))
    warmups = run * ((plan.c1 or bool(plan.concurrency)) + (plan.c1_throughput or bool(plan.concurrency)))
    sweep = len(plan.swept) * (5.0 + len(b.sweep.concurrency) * (3 * b.sweep.measurement_interval_ms / 1000 + 1.0 + 2 * req))
    baseline = 5.0 + len(b.baseline.batch_sizes) * b.baseline.seconds
    embedded = b.server == BenchServer.embedded
    cold = 4 * 5.0 * (embedded and b.readiness.cold_start)  # two variants, with and without warmup, a fresh server each
    overload = (len(b.overload.levels) * (3 * b.overload.interval_ms / 1000 + 2) + 3 * (b.overload.burst_s + 1.5) + 8) * (embedded and b.overload.enabled)
    peers = peers_mod.expected_seconds(b) if b.peers else 0.0
    return {
        "baseline": baseline,
        "cold start": cold,
        "sweep": sweep,
        "rounds": rounds + warmups,
        "overload": overload,
        "soak": b.soak.duration_s * embedded,
        "peers": peers,
        "report": 8.0 + (b.baseline.warmup_runs + b.baseline.runs) * req,
    }


# ---------------------------------------------------------------- inputs
def _variant_order(configs: dict[str, Path]) -> list[str]:
    known = [v for v in ("latency", "throughput") if v in configs]
    return known + [v for v in configs if v not in known]


def main_config(configs: dict[str, mc.ModelConfig]) -> mc.ModelConfig:
    """The config the inputs and the in-process latency side follow: the latency variant's, else the first."""
    return configs.get("latency") or next(iter(configs.values()))


def shipped_configs(model_dir: Path) -> tuple[ShippedModel, dict[str, mc.ModelConfig]]:
    """The shipped model and its variants' configs (latency first, then throughput, then any other)."""
    shipped = find_shipped(model_dir)
    return shipped, {v: read_config(shipped.configs[v]) for v in _variant_order(shipped.configs)}


def tune_of(path: Path | None, model: MeasuredModel, log: Callable[[str], None]) -> TuneRecord | None:
    """The tune record, when it was searched on the throughput variant's file measured here (a report carries only
    what was produced from its own files: a record of another file is left out, and the log says so). The file's
    digest is the one measured_model took."""
    measured = (model.files_sha256 or {}).get("throughput")
    if path is None or measured is None:
        return None
    record = read_tune(path, BenchError)
    if record.onnx_sha256 != measured:
        log(f"[bench] {path} is of another file than the throughput variant measured: left out of the report")
        return None
    return record


def measured_model(shipped: ShippedModel) -> MeasuredModel:
    """The files measured, with their sha256: a release embeds this report only if its files have these digests."""
    return MeasuredModel(
        shipped.name,
        str(shipped.onnx),
        shipped.version,
        {v: str(p) for v, p in shipped.configs.items()},
        file_digest(shipped.onnx)[0],
        {v: file_digest(p)[0] for v, p in shipped.configs.items()},
        {v: file_digest(p)[0] for v, p in shipped.files.items()},
    )


# ---------------------------------------------------------------- baseline
def baseline_again(base: Baseline, onnx: Path, settings: OrtSettings, inp: BenchInputs, b: BenchConfig) -> None:
    """Batch-1 latency in process again after the sweep; the faster of the two becomes ``base.latency``.

    The ratio uses the faster of the two in-process p50s, so drift in machine load between baseline
    and sweep can only make the served numbers look worse, never better.
    """
    again = baseline_latency(onnx, settings, inp.rows, b.baseline.warmup_runs, b.baseline.runs)
    base.latency_after = again
    if again.p50_ms < base.latency.p50_ms:
        base.latency, base.latency_after = again, base.latency


# ---------------------------------------------------------------- served measurements
def server_info(mode: Mode) -> ServerInfo:
    """What the report says about the server (the version is filled in once a variant is served)."""
    if isinstance(mode, EmbeddedMode):
        return ServerInfo(mode.mode, mode.description, mode.backend, mode.changes)
    return ServerInfo(mode.mode, mode.description)


def sweep_variants(mode: Mode, sweeper: Sweeper, b: BenchConfig, variants: list[str], server: ServerInfo, progress: Progress) -> dict[str, Sweep]:
    """Each of ``variants`` in a server of its own, swept over bench.sweep.concurrency (the curves)."""
    out: dict[str, Sweep] = {}
    if variants:
        progress.phase("sweep")
    for variant in variants:
        with mode.serve(variant) as t:
            server.triton_version = t.version
            points = []
            for c in b.sweep.concurrency:
                progress.at(f"{variant} c={c}")
                points += sweeper.run(t, [c], variant)
            out[variant] = Sweep(points)
    return out


def _keeping_logs(e: PipelineError, logs: Path) -> PipelineError:
    """``e`` again, naming a copy of perf_analyzer's and the server's logs (outside artifacts/) to read the failure in."""
    kept = Path(tempfile.mkdtemp(prefix="bench-failed-logs-"))
    shutil.copytree(logs, kept, dirs_exist_ok=True)
    e.details["logs kept in"] = kept
    return type(e)(e.what, e.fix, e.details)


# ---------------------------------------------------------------- outputs
def write_outputs(res: BenchResult, shipped: ShippedModel, logs: Path, out_dir: Path, curves_dir: Path) -> None:
    """report.md, bench.png, logs and the configs measured into ``out_dir``; curves into ``curves_dir``."""
    with atomic_path(out_dir) as tmp:
        render.write_outputs(res, tmp)
        (tmp / "logs").mkdir()
        for f in logs.iterdir():
            os.replace(f, tmp / "logs" / f.name)
        for v, p in shipped.configs.items():
            write_text(tmp / "configs" / f"{v}.pbtxt", p.read_text())
    with atomic_path(curves_dir) as tmp:
        tmp.mkdir()
        for v in res.variants:
            write_text(tmp / f"{v}.csv", render.curves_csv(res, v))
