"""Production readiness in the bench run: where cold start, overload and soak go, and what they ride on.

Cold start needs fresh servers (one per variant and warmup setting, a few seconds each); overload and the soak
ride on the server the headline rounds already hold both variants in, right after the rounds; memory and
Triton's /metrics are read around every measured point by the sweeper. External mode measures none of the
three (the server was started elsewhere and serves one config at a time): the report says so.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.bench.readiness import coldstart
from pipeline.bench.readiness import overload as overload_mod
from pipeline.bench.readiness import soak as soak_mod
from pipeline.bench.measure.inputs import BenchInputs
from pipeline.bench.measure.results import Sweep
from pipeline.bench.readiness.results import Production, Trace, thin
from pipeline.bench.progress import Progress
from pipeline.bench.rounds.results import ThroughputRounds
from pipeline.bench.measure.servers import EmbeddedMode, ExternalMode, Mode, Target
from pipeline.bench.measure.sweep import Sweeper
from pipeline.core.config import BenchConfig


def record(mode: Mode) -> Production:
    """The empty record: what /metrics leaves out, and (external mode) what is not measured."""
    prod = Production(metrics_limits=list(mode.metrics_limits))
    if isinstance(mode, ExternalMode):
        prod.notes.append(
            "external mode: no cold start, overload or soak (the server was started elsewhere and serves one config "
            "at a time); its RSS is not sampled (GPU memory comes from its /metrics when it has them)"
        )
    return prod


def cold(prod: Production, mode: Mode, b: BenchConfig, inp: BenchInputs, variants: list[str], logs: Path, progress: Progress) -> None:
    """Cold starts, first (embedded, bench.readiness.cold_start): fresh servers, before any other server ran on the machine."""
    if isinstance(mode, ExternalMode):
        return
    if not b.readiness.cold_start:
        prod.notes.append("cold start not measured (bench.readiness.cold_start=false)")
        return
    progress.phase("cold start")
    prod.cold_start = coldstart.cold_starts(mode, variants, inp.rows[0], b.readiness.cold_start_requests, logs, progress.log)


def capacity(pairs: dict[int, ThroughputRounds], sweeps: dict[str, Sweep]) -> tuple[float, int, str] | None:
    """The throughput variant's measured capacity (infer/s), the concurrency it was reached at, and where it comes from."""
    best = [(x, c) for c, r in pairs.items() if (x := r.infer_s("throughput"))]
    if best:
        infer_s, c = max(best)
        return infer_s, c, f"median throughput-variant infer/s over the c={c} rounds"
    pts = [p for p in sweeps.get("throughput", Sweep([])).points if p.valid]
    if not pts:
        return None
    p = max(pts, key=lambda p: p.metrics["throughput_infer_s"])
    return p.metrics["throughput_infer_s"], p.concurrency, f"the sweep's best point (c={p.concurrency})"


def after_rounds(prod: Production, mode: EmbeddedMode, sw: Sweeper, ts: dict[str, Target], cap: tuple[float, int, str] | None, inp: BenchInputs, progress: Progress) -> None:
    """Overload, burst and the bounded-queue check, then the soak, on the rounds' server (throughput variant)."""
    b = sw.bench
    t = ts.get("throughput")
    if t is None or cap is None:
        prod.notes.append("overload and soak not measured: no throughput variant with a measured capacity")
        return
    infer_s, c, source = cap
    if b.overload.enabled and b.overload.levels:
        progress.phase("overload")
        prod.overload = overload_mod.overload(mode, sw, t, inp.rows, infer_s, source)
    elif not b.overload.enabled:
        prod.notes.append("overload not measured (bench.overload.enabled=false)")
    if b.soak.duration_s > 0:
        progress.phase("soak", b.soak.duration_s)
        prod.soak = soak_mod.soak(sw, t, c, progress.log)


def finish(prod: Production, mode: Mode, t0: float) -> None:
    """Every server's RSS over the bench, for the plot (seconds since ``t0``, the bench's start)."""
    if isinstance(mode, EmbeddedMode):
        prod.traces = [Trace(label, thin(list(mem.samples), t0)) for label, mem in mode.traces]
