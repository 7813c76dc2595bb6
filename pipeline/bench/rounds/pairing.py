"""The headline rounds: every ratio from measurements taken next to each other, rounds interleaved until the intervals are narrow.

This machine's speed drifts by tens of percent within a minute (a shared VM; it flips between a
fast and a slow state every few seconds, and other work on it comes and goes). Two numbers taken
apart can make a ratio say anything; two taken together share the machine's speed, and it cancels
in their ratio. So each round yields ratios of neighbours only, the headline is the median over
rounds, and its interval (estimate.py) says how much the drift left. Nothing is thrown away for
drifting: a round split by a speed change is an outlier the median resists and the interval shows.

Served c=1 against in-process ORT is measured as a product of two drift-free factors, not as a
served run between in-process gauges (which miss a speed change that starts and ends inside the run):

- served p50 / the server's own time inside ORT, both from the same perf_analyzer window (the
  stand-in backend times its ORT call per request): the serving path's share, immune to drift
  because numerator and denominator are the same requests;
- the server's time inside ORT / in-process ORT p50, from ``bench.rounds.alternations`` short bursts (about
  ``bench.rounds.alternation_ms`` each) alternating between the server and this process, first one then the
  other, a fraction of a second apart: a drift of seconds moves both sides of each pair alike.

Their product is served / in-process at one machine speed. An external Triton has no in-server ORT
timer (it may run on a GPU), so there in-process p50 is timed right before and right after the run.

Throughput variant against latency variant runs both in one server, back to back, in an order that
alternates per round, with in-process best-batch throughput timed next to the throughput variant's
run: its share of in-process comes from neighbours too.

Groups of rounds (c=1, and each compared concurrency) interleave, one round of each in turn; a
group stops by :class:`~pipeline.stats.estimate.StopRule`, which reads interval widths only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.stats.estimate import StopRule
from pipeline.bench.measure.results import Point
from pipeline.bench.progress import Progress
from pipeline.bench.rounds.results import Alternation, C1Round, C1Rounds, ThroughputRound, ThroughputRounds


@dataclass
class Group:
    """One headline group: its record, and ``step(i)``, which measures round ``i`` and appends it to the record."""

    label: str
    record: C1Rounds | ThroughputRounds
    step: Callable[[int], None]
    rule: StopRule
    seconds: list[float] = field(default_factory=list)  # each round's duration, for the ETA

    @property
    def ran(self) -> int:
        return len(self.record.rounds)


def alternations(server_ms: Callable[[], float | None], process_ms: Callable[[], float], n: int, server_first: bool) -> list[Alternation]:
    """``n`` pairs of one server burst and one in-process burst, which goes first alternating pair by pair."""
    out = []
    for k in range(n):
        first = server_first == (k % 2 == 0)
        if first:
            s, p = server_ms(), process_ms()
        else:
            p, s = process_ms(), server_ms()
        out.append(Alternation(s, p, first))
    return out


def c1_embedded(serve: Callable[[str, int], Point], alternate: Callable[[int], list[Alternation]], in_server_key: str, with_throughput: bool, rule: StopRule) -> Group:
    """c=1 rounds in an embedded server: the latency variant (and the throughput one, order alternating), then the alternations.

    ``serve(variant, round)`` runs perf_analyzer at c=1; ``alternate(round)`` the server/in-process bursts.
    """
    rec = C1Rounds(in_server_key)

    def step(i: int) -> None:
        order = ["latency", "throughput"] if with_throughput else ["latency"]
        if i % 2:
            order.reverse()
        got = {v: serve(v, i) for v in order}
        rec.rounds.append(C1Round(i, got["latency"], got.get("throughput"), order, alternate(i)))

    return Group("c=1", rec, step, rule)


def c1_external(serve: Callable[[int], Point], ort_p50: Callable[[], float], rule: StopRule) -> Group:
    """c=1 rounds against an external Triton: in-process ORT p50 right before and right after each served run."""
    rec = C1Rounds(None)

    def step(i: int) -> None:
        before = ort_p50()
        p = serve(i)
        rec.rounds.append(C1Round(i, p, None, ["gauge", "latency", "gauge"], gauges=[before, ort_p50()]))

    return Group("c=1", rec, step, rule)


def throughput_at(c: int, serve: Callable[[str, int, int], Point], ort_best: Callable[[], float], rule: StopRule) -> Group:
    """Rounds at concurrency ``c``: [latency, throughput, gauge] and [gauge, throughput, latency] in turn.

    ``serve(variant, c, round)`` runs perf_analyzer on one variant of a server holding both; the
    gauge (in-process ORT infer/s at the baseline's best batch) sits next to the throughput run,
    on either side in turn, and the latency run on the other side, so linear drift favours neither.
    """
    rec = ThroughputRounds(c)

    def step(i: int) -> None:
        order = ["latency", "throughput", "gauge"] if i % 2 == 0 else ["gauge", "throughput", "latency"]
        served: dict[str, Point] = {}
        gauge = 0.0
        for s in order:  # in this order: the gauge's side alternates
            if s == "gauge":
                gauge = ort_best()
            else:
                served[s] = serve(s, c, i)
        rec.rounds.append(ThroughputRound(i, order, served["latency"], served["throughput"], gauge))

    return Group(f"c={c}", rec, step, rule)


def _left_s(groups: list[Group], elapsed: float) -> float | None:
    """Seconds the active ``groups`` may still take: each to its max, or, under a budget, up to the budget
    (more only where a group still lacks its minimum). None before any round has run: nothing to go by."""
    done = [x for g in groups for x in g.seconds]
    if not done:
        return None
    default = sum(done) / len(done)

    def per_round(g: Group) -> float:
        return sum(g.seconds) / len(g.seconds) if g.seconds else default

    most = sum((g.rule.max_rounds - g.ran) * per_round(g) for g in groups)
    budgets = [g.rule.budget_s for g in groups if g.rule.target is not None and g.rule.budget_s is not None]
    if len(budgets) < len(groups):
        return most
    least = sum(max(0, g.rule.min_rounds - min((e.n for e in g.record.decisive()), default=0)) * per_round(g) for g in groups)
    return min(most, max(least, max(budgets) - elapsed))


def run_rounds(groups: list[Group], progress: Progress, clock: Callable[[], float] = time.monotonic) -> None:
    """One round of each active group in turn, until its rule stops it (the reason is recorded in ``stopped``)."""
    t0 = clock()
    active = list(groups)
    while active:
        for g in list(active):
            why = g.rule.reason(g.ran, g.record.decisive(), clock() - t0)
            if why is not None:
                g.record.stopped = why
                active.remove(g)
                continue
            limit = g.rule.max_rounds if g.rule.target is None else f"<={g.rule.max_rounds}"
            progress.at(g.label, f"round {g.ran + 1}/{limit}", _left_s(active, clock() - t0))
            start = clock()
            g.step(g.ran)
            g.seconds.append(clock() - start)
