"""The headline rounds in a bench run: what they measure (:class:`RoundsPlan`), when they stop, and on which server.

The rounds themselves (groups of neighbouring measurements, interleaved) are pairing.py's; this module serves them:
embedded, one server holds every variant the rounds measure; external, c=1 rounds in the latency variant's load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.bench.measure.baseline import Gauges
from pipeline.bench.measure.inputs import BenchInputs
from pipeline.bench.measure.inserver import WARM_RUNS, InServerOrt
from pipeline.bench.measure.results import Point
from pipeline.bench.measure.servers import EmbeddedMode, ExternalMode, Mode, Target
from pipeline.bench.measure.sweep import Sweeper
from pipeline.bench.progress import Progress
from pipeline.bench.rounds.pairing import alternations, c1_embedded, c1_external, run_rounds, throughput_at
from pipeline.bench.rounds.results import Alternation, C1Rounds, ThroughputRounds
from pipeline.core.config import BenchConfig, BenchProfile, BenchServer
from pipeline.stats.estimate import StopRule


@dataclass
class RoundsPlan:
    """What the rounds measure and which variants the sweep measures (the rest come from the rounds).

    ``c1``: c=1 rounds on the latency variant; ``c1_throughput``: the throughput variant beside it in them (the
    batching tax; embedded, both variants, 1 in bench.rounds.throughput.concurrency); ``concurrency``: where both
    variants are compared in rounds (embedded only: an external Triton serves one variant at a time).
    """

    c1: bool
    c1_throughput: bool
    concurrency: list[int]
    swept: list[str]

    @classmethod
    def of(cls, b: BenchConfig, variants: list[str]) -> RoundsPlan:
        embedded = b.server == BenchServer.embedded
        both = embedded and {"latency", "throughput"} <= set(variants)
        c1 = b.rounds.c1.min > 0 and "latency" in variants
        c1_thr = c1 and both and 1 in b.rounds.throughput.concurrency
        conc = sorted({int(c) for c in b.rounds.throughput.concurrency if c > 1}) if both and b.rounds.throughput.min > 0 else []
        if b.profile == BenchProfile.full or not embedded:
            return cls(c1, c1_thr, conc, list(variants))
        covered = {v for v, measured in (("latency", c1 or conc), ("throughput", c1_thr or conc)) if measured}
        return cls(c1, c1_thr, conc, [v for v in variants if v not in covered])


def stop_rules(b: BenchConfig) -> tuple[StopRule, StopRule]:
    """When the c=1 rounds and the throughput rounds stop: the full profile runs every round."""
    target, budget = (b.rounds.target_half_width, b.rounds.budget_s) if b.profile == BenchProfile.default else (None, None)
    return (
        StopRule(b.rounds.c1.min, b.rounds.c1.max, target, budget),
        StopRule(b.rounds.throughput.min, b.rounds.throughput.max, target, budget, "bench.rounds.throughput.max"),
    )


def measure_rounds(
    mode: Mode,
    sweeper: Sweeper,
    gauges: Gauges,
    b: BenchConfig,
    plan: RoundsPlan,
    inp: BenchInputs,
    progress: Progress,
    then: Callable[[EmbeddedMode, dict[str, Target], dict[int, ThroughputRounds]], None] | None = None,
) -> tuple[C1Rounds | None, dict[int, ThroughputRounds]]:
    """The headline rounds (rounds/pairing.py): c=1, and both variants at each compared concurrency, interleaved.

    Embedded: one server holds every variant the rounds measure as a model of its own, so switching between
    them costs nothing. External: c=1 rounds only, in the latency variant's load.
    """
    if not plan.c1 and not plan.concurrency:
        return None, {}  # no rounds' server: overload and soak are not measured (readiness notes it)
    progress.phase("rounds")
    c1_rule, tput_rule = stop_rules(b)
    interval, stability = b.rounds.measurement_interval_ms, b.rounds.stability_percentage

    def run(t: Target, c: int, tag: str) -> Point:
        return sweeper.run(t, [c], tag, interval, stability)[0]

    if isinstance(mode, ExternalMode):
        with mode.serve("latency") as t:
            group = c1_external(lambda i: run(t, 1, f"c1_round{i}_latency"), gauges.p50_ms, c1_rule)
            run_rounds([group], progress)
        return (group.record if isinstance(group.record, C1Rounds) else None), {}
    served = ["latency"] * (plan.c1 or bool(plan.concurrency)) + ["throughput"] * (plan.c1_throughput or bool(plan.concurrency))
    burst_s = b.rounds.alternation_ms / 1000
    with mode.serve_together(served) as ts:
        # A fresh server's first run per model pays first-request costs (allocations for each batch shape): discarded.
        for v in served:
            run(ts[v], max(plan.concurrency or [1]), f"warmup_{v}")
        groups = []
        if plan.c1:
            timer = InServerOrt(ts["latency"], inp.rows, burst_s)
            key = mode.in_server_ort_key or ""

            def alternate(i: int) -> list[Alternation]:
                return alternations(timer.burst, lambda: gauges.burst_p50_ms(burst_s, WARM_RUNS), b.rounds.alternations, i % 2 == 0)

            groups.append(c1_embedded(lambda v, i: run(ts[v], 1, f"c1_round{i}_{v}"), alternate, key, plan.c1_throughput, c1_rule))
        for c in plan.concurrency:
            groups.append(throughput_at(c, lambda v, c, i: run(ts[v], c, f"c{c}_round{i}_{v}"), gauges.best_infer_s, tput_rule))
        try:
            run_rounds(groups, progress)
        finally:
            if plan.c1:
                timer.close()
        pairs = {g.record.concurrency: g.record for g in groups if isinstance(g.record, ThroughputRounds)}
        if then is not None:
            then(mode, ts, pairs)
    pc1 = next((g.record for g in groups if isinstance(g.record, C1Rounds)), None)
    return pc1, pairs
