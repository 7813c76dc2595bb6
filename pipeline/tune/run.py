"""The tune stage end to end: the search, the confirmation of its winner, and Model Analyzer beside it.

Off (``tune.enabled=false``), the record says the configured variant ships and nothing is measured. On, the search
(search.py) runs in the time budget; then one server holds the winner, the configured variant, the runner-up and (with
``tune.model_analyzer.enabled``) Model Analyzer's best, measured in ``tune.final_rounds`` alternating paired rounds: how
far the tune moved the shipped variant, why the winner and not the runner-up, and ours against Model Analyzer's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.bench.measure.machine import cpu_budget
from pipeline.core.atomic import file_digest
from pipeline.core.config import PipelineConfig, TuneObjective
from pipeline.records.tune import AnalyzerRun, Comparison, TuneKnobs, TuneRecord
from pipeline.repository.served import Served
from pipeline.repository.writer import CandidateWriter
from pipeline.tune.analyzer import run as run_analyzer
from pipeline.tune.arena import ShippedArena
from pipeline.tune.search import Arena, Clock, Rows, Sample, SearchResult, interval, search


def run_tune(cfg: PipelineConfig, onnx: Path | dict[str, Served], parity: Path | None, work: Path, log: Callable[[str], None] = print) -> TuneRecord:
    """Search (or, off, record) the throughput variant's scheduling on the file it serves; see the module doc.

    Raises:
        RepositoryError: the file did not pass ``parity``. ToolError / BenchError: the server or perf_analyzer failed.
    """
    t = cfg.tune
    start = TuneKnobs.of_variant(cfg.variants.throughput)
    writer = CandidateWriter(cfg, onnx, parity)
    served = writer.served
    record = TuneRecord(
        t.enabled,
        "config",
        str(t.objective),
        t.constraints.perf_latency_p99,
        list(t.concurrency),
        start,
        start,
        "tune.enabled=false: the throughput variant ships as configured (dvc exp run -S tune.enabled=true searches it)",
        onnx=str(served.path),
        onnx_sha256=file_digest(served.path)[0],
        precision=served.precision,
        budget_s=t.budget_s,
    )
    if not t.enabled:
        return record
    record.cores = cores = cpu_budget()
    arena = ShippedArena(cfg, writer, work, log)
    t0 = time.monotonic()
    res = search(arena, start, t, cores, Clock(t.budget_s), log)
    record.wall_s = round(time.monotonic() - t0, 1)
    decide(record, res, t.constraints.perf_latency_p99)
    ma = run_analyzer(cfg, arena, work / "model-analyzer", log) if t.model_analyzer.enabled else None
    record.model_analyzer = ma
    confirm(record, arena, runner_up(res), ma, t.final_rounds, log)
    return record


def decide(record: TuneRecord, res: SearchResult, bound: float) -> None:
    """The winner and the one-line reason, from the search's result."""
    record.trials, record.partial, record.best_p99_ms = res.trials, res.partial, res.best_p99_ms
    cut = f" (partial: the {record.budget_s:g} s budget ran out; the best so far ships)" if res.partial else ""
    if res.winner != res.start and any(tr.feasible and tr.knobs == res.winner for tr in res.trials):
        record.source, record.winner = "search", res.winner
        record.reason = "moved " + "; ".join(res.moved) + cut
    elif not any(tr.feasible for tr in res.trials):
        record.source = "config-kept"
        best = "no valid measurement" if res.best_p99_ms is None else f"the best p99 seen was {res.best_p99_ms:.1f} ms"
        record.reason = f"no candidate met p99 <= {bound:g} ms: the configured variant ships unchanged; {best}" + cut
    else:
        record.source = "config-kept"
        record.reason = "no candidate beat the configured variant with 90% confidence: it ships unchanged" + cut


def runner_up(res: SearchResult) -> TuneKnobs | None:
    """The best candidate that did not win: in the last step the winner took part in, the best other one that met the
    constraint (by its ratio to that step's incumbent)."""
    steps = sorted({tr.step for tr in res.trials if tr.knobs == res.winner})
    if not steps:
        return None
    others = [tr for tr in res.trials if tr.step == steps[-1] and tr.knobs != res.winner and tr.feasible and tr.vs_incumbent.value is not None]
    best = max(others, key=lambda tr: tr.vs_incumbent.value or 0.0, default=None)
    return best.knobs if best else None


@dataclass(frozen=True)
class _Arm:
    name: str
    knobs: TuneKnobs


def confirm(record: TuneRecord, arena: Arena, second: TuneKnobs | None, ma: AnalyzerRun | None, rounds: int, log: Callable[[str], None]) -> None:
    """The winner against the configured variant, the runner-up and Model Analyzer's best, in alternating paired rounds
    in one server (each round measures them all, the order rotating), as Comparisons on ``record``."""
    arms = [_Arm("winner", record.winner)]
    for name, k in (("start", record.start), ("runner-up", second), ("model-analyzer", ma.knobs if ma and ma.ran else None)):
        if k is not None and all(a.knobs != k for a in arms):
            arms.append(_Arm(name, k))
    if len(arms) == 1:
        if ma is not None and ma.knobs == record.winner:
            record.notes.append("Model Analyzer's best is our winner: nothing to compare")
        return
    rows = Rows({a.name: [] for a in arms})
    log(f"[tune] confirming: {', '.join(f'{a.name} {a.knobs.label()}' for a in arms)}, {rounds} paired rounds")
    with arena.session({a.name: a.knobs for a in arms}) as measure:
        for r in range(rounds):
            order = arms[r % len(arms) :] + arms[: r % len(arms)]
            for a in order:
                rows.samples[a.name].append(measure(a.name))
    # Where the winner is the configured variant (or Model Analyzer found it too) there is nothing to pair it with.
    record.vs_start = _compare(rows, "winner", "start", record.winner, record.start) if "start" in rows.samples else None
    record.runner_up = _compare(rows, "winner", "runner-up", record.winner, second) if "runner-up" in rows.samples else None
    if ma is not None and ma.knobs is not None and ma.knobs != record.winner:
        ma_name = next(a.name for a in arms if a.knobs == ma.knobs)
        record.vs_model_analyzer = _compare(rows, "winner", ma_name, record.winner, ma.knobs)
    elif ma is not None and ma.knobs is not None:
        record.notes.append("Model Analyzer's best is our winner: nothing to compare")


def _compare(rows: Rows, a: str, b: str, ak: TuneKnobs | None, bk: TuneKnobs | None) -> Comparison:
    """``a`` against ``b`` over the same rounds: the throughput ratio (a over b, per round) and each one's medians."""
    return Comparison(
        a,
        b,
        ak,
        bk,
        interval(rows.ratios(a, b, TuneObjective.perf_throughput)),
        rows.median(a, Sample.throughput),
        rows.median(b, Sample.throughput),
        rows.median(a, Sample.worst_p99),
        rows.median(b, Sample.worst_p99),
    )
