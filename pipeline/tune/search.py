"""Coordinate descent with successive halving, ranked by paired rounds: the tune's search, apart from any server.

From the configured variant (the incumbent), each step moves one knob (space.AXES): the incumbent and every value the
knob may take are loaded into one server (``Arena.session``) and measured in rounds, each round every surviving
candidate once, in a shuffled order, beside the incumbent. A candidate's score in a round is its objective over the
incumbent's in that same round, so a change of the machine's speed between rounds cancels (the bench's pairing,
docs/benchmarking.md); after each round past the first, the worse half of the challengers is dropped (successive
halving). The best survivor is then measured against the incumbent again, in ``tune.rounds`` fresh paired rounds:
rounds that picked the best of many favour it (the winner's curse), so only the fresh ones decide. It replaces the
incumbent when it meets the p99 constraint there and its ratio's 90% interval lies above ``1 + tune.min_gain``, or
when the incumbent does not meet the constraint and it does. Passes over the knobs
repeat until one moves nothing, ``tune.passes`` ran, or the time budget is spent: then the best so far is the winner,
marked partial.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.core.config import TuneConfig, TuneObjective
from pipeline.records.tune import Interval, Trial, TuneKnobs
from pipeline.stats.estimate import estimate
from pipeline.tune import space as space_mod


@dataclass(frozen=True)
class Sample:
    """One measurement of one candidate: infer/s and p99 at each of tune.concurrency (None: that run was invalid)."""

    infer_s: dict[int, float | None]
    p99_ms: dict[int, float | None]
    reason: str = ""  # why a run was invalid

    @property
    def valid(self) -> bool:
        return all(v is not None for v in self.infer_s.values()) and all(v is not None for v in self.p99_ms.values())

    def throughput(self) -> float | None:
        """The geometric mean of infer/s over the concurrencies (each counts alike, whatever its scale)."""
        if not self.valid:
            return None
        vals = [v for v in self.infer_s.values() if v]
        return statistics.geometric_mean(vals) if vals else None

    def worst_p99(self) -> float | None:
        return max(v for v in self.p99_ms.values() if v is not None) if self.valid else None


Measure = Callable[[str], Sample]  # candidate name -> one measurement of it


class Arena(Protocol):
    """Serves candidates: ``session`` loads them together into one server and yields a :data:`Measure`."""

    def session(self, candidates: dict[str, TuneKnobs]) -> contextlib.AbstractContextManager[Measure]: ...


@dataclass
class Clock:
    """The budget: ``left()`` seconds until the deadline (time.monotonic, so a clock change does not move it)."""

    budget_s: float
    now: Callable[[], float] = time.monotonic
    start: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.start = self.now()

    def left(self) -> float:
        return self.budget_s - (self.now() - self.start)

    def elapsed(self) -> float:
        return self.now() - self.start


@dataclass
class Rows:
    """Every measurement of a step, by candidate, round by round (None where it was not measured that round)."""

    samples: dict[str, list[Sample | None]]

    def ratios(self, name: str, base: str, objective: TuneObjective) -> list[float | None]:
        """``name`` over ``base`` in each round both were measured validly (> 1: ``name`` is better)."""
        out: list[float | None] = []
        for a, b in zip(self.samples[name], self.samples[base]):
            if a is None or b is None or not a.valid or not b.valid:
                out.append(None)
                continue
            if objective == TuneObjective.perf_throughput:
                ta, tb = a.throughput(), b.throughput()
                out.append(ta / tb if ta and tb else None)
            else:
                pa, pb = a.worst_p99(), b.worst_p99()
                out.append(pb / pa if pa and pb else None)
        return out

    def median(self, name: str, pick: Callable[[Sample], float | None]) -> float | None:
        vals = [v for s in self.samples[name] if s is not None and s.valid for v in [pick(s)] if v is not None]
        return statistics.median(vals) if vals else None


def interval(ratios: list[float | None]) -> Interval:
    e = estimate(ratios)
    return Interval(e.value, e.low, e.high, e.n)


@dataclass
class Step:
    """One knob's comparison: who was in it, what they measured, and who came out ahead."""

    knob: str
    names: dict[str, TuneKnobs]  # "inc" is the incumbent
    rows: Rows
    dropped: dict[str, int]  # challenger -> the round after which it was dropped
    winner: str  # "inc" when nothing moved
    partial: bool
    best: str | None = None  # the challenger confirmed in fresh rounds
    fresh: Rows | None = None  # those rounds: the incumbent and ``best`` only


def run_step(arena: Arena, knob: str, incumbent: TuneKnobs, challengers: list[TuneKnobs], t: TuneConfig, clock: Clock, seed: int) -> Step:
    """Measure ``incumbent`` and its ``challengers`` on ``knob`` in paired rounds with halving, then the best challenger
    against the incumbent again in fresh rounds, which alone decide (the rounds that picked the best of many are
    biased in its favour: the winner's curse); see the module doc."""
    names = {"inc": incumbent} | {f"c{i}": k for i, k in enumerate(challengers)}
    rows = Rows({n: [] for n in names})
    alive = [n for n in names if n != "inc"]
    dropped: dict[str, int] = {}
    rng = random.Random(seed)
    bound = t.constraints.perf_latency_p99
    with arena.session(names) as measure:
        partial = False
        for r in range(t.rounds):
            partial = not _round(measure, rows, ["inc", *alive], rng, clock)
            if partial:
                break
            if r >= 1 and len(alive) > 1:
                alive = _halve(rows, alive, t, bound, dropped, r)
        best = _best(rows, alive, t, bound)
        fresh = None
        if best is not None and not partial:
            fresh = Rows({"inc": [], best: []})
            for _ in range(t.rounds):
                partial = not _round(measure, fresh, ["inc", best], rng, clock)
                if partial:
                    break
    winner = _pick(fresh, best, t, bound) if fresh is not None and best is not None else "inc"
    return Step(knob, names, rows, dropped, winner, partial, best, fresh)


def _round(measure: Measure, rows: Rows, names: list[str], rng: random.Random, clock: Clock) -> bool:
    """One round of ``names`` in a shuffled order into ``rows``; False when the budget ran out (the round then pairs
    nothing: it is recorded empty)."""
    order = list(names)
    rng.shuffle(order)
    got: dict[str, Sample] = {}
    done = True
    for n in order:
        if clock.left() <= 0:
            got, done = {}, False
            break
        got[n] = measure(n)
    for n in rows.samples:
        rows.samples[n].append(got.get(n))
    return done


def _score(rows: Rows, name: str, t: TuneConfig) -> float:
    e = estimate(rows.ratios(name, "inc", t.objective))
    return e.value if e.value is not None else -math.inf


def _feasible(rows: Rows, name: str, bound: float) -> bool:
    p99 = rows.median(name, Sample.worst_p99)
    return p99 is not None and p99 <= bound


def _halve(rows: Rows, alive: list[str], t: TuneConfig, bound: float, dropped: dict[str, int], r: int) -> list[str]:
    """The better half of ``alive`` (rounded up), candidates that meet the constraint first."""
    ranked = sorted(alive, key=lambda n: (_feasible(rows, n, bound), _score(rows, n, t)), reverse=True)
    keep = ranked[: math.ceil(len(ranked) / 2)]
    for n in ranked[len(keep) :]:
        dropped[n] = r + 1
    return keep


def _best(rows: Rows, alive: list[str], t: TuneConfig, bound: float) -> str | None:
    """The challenger to confirm: the best survivor that meets the constraint (None: none does)."""
    ok = [n for n in alive if _feasible(rows, n, bound)]
    return max(ok, key=lambda n: _score(rows, n, t)) if ok else None


def _pick(fresh: Rows, best: str, t: TuneConfig, bound: float) -> str:
    """``best`` when its fresh rounds show it meets the constraint and either the incumbent does not, or the 90%
    interval of its ratio lies above 1 + min_gain; else "inc"."""
    if not _feasible(fresh, best, bound):
        return "inc"
    if not _feasible(fresh, "inc", bound):
        return best  # meeting the constraint beats not meeting it
    e = interval(fresh.ratios(best, "inc", t.objective))
    return best if e.low is not None and e.low > 1 + t.min_gain else "inc"


@dataclass
class SearchResult:
    winner: TuneKnobs
    start: TuneKnobs
    trials: list[Trial]
    steps: list[Step]
    partial: bool
    moved: list[str]  # one line per move
    best_p99_ms: float | None
    start_feasible: bool | None  # None: never measured validly


def search(arena: Arena, start: TuneKnobs, t: TuneConfig, cores: int, clock: Clock, log: Callable[[str], None] = print) -> SearchResult:
    """Coordinate descent from ``start`` over space.AXES; see the module doc."""
    incumbent = start
    trials: list[Trial] = []
    steps: list[Step] = []
    moved: list[str] = []
    partial = False
    start_feasible: bool | None = None
    for p in range(t.passes):
        moved_this_pass = False
        for knob in space_mod.AXES:
            cands = space_mod.challengers(knob, incumbent, t.space, cores)
            if not cands:
                continue
            if clock.left() <= 0:
                partial = True
                break
            log(f"[tune] pass {p + 1}, {knob}: {incumbent.label()} against {len(cands)} value(s) ({clock.left():.0f} s left)")
            step = run_step(arena, knob, incumbent, cands, t, clock, seed=len(steps))
            steps.append(step)
            step_trials = _trials(step, len(steps) - 1, t)
            trials += step_trials
            if start_feasible is None and step.rows.median("inc", Sample.worst_p99) is not None:
                start_feasible = _feasible(step.rows, "inc", t.constraints.perf_latency_p99)
            if step.winner != "inc":
                new = step.names[step.winner]
                won = step_trials[list(step.names).index(step.winner)]
                ratio = won.confirmed or won.vs_incumbent  # the fresh rounds decided the move: they are what it says
                moved.append(f"{knob}: {space_mod.value(incumbent, knob)} -> {space_mod.value(new, knob)} ({ratio.text()})")
                log(f"[tune] moved {moved[-1]}")
                incumbent, moved_this_pass = new, True
            if step.partial:
                partial = True
                break
        if partial or not moved_this_pass:
            break
    p99s = [tr.p99_ms for tr in trials if tr.p99_ms is not None]
    return SearchResult(incumbent, start, trials, steps, partial, moved, min(p99s) if p99s else None, start_feasible)


def _trials(step: Step, i: int, t: TuneConfig) -> list[Trial]:
    bound = t.constraints.perf_latency_p99
    out = []
    for n, k in step.names.items():
        ran = [s for s in step.rows.samples[n] if s is not None]
        valid = [s for s in ran if s.valid]
        confirmed = interval(step.fresh.ratios(n, "inc", t.objective)) if step.fresh is not None and n == step.best else None
        if n == "inc":
            verdict = "incumbent" if step.winner != "inc" else "incumbent, kept"
        elif n == step.winner:
            verdict = "moved the search: confirmed in fresh rounds"
        elif confirmed is not None:
            verdict = f"best of the step, not confirmed above the incumbent by {t.min_gain:.0%} in fresh rounds"
        elif n in step.dropped:
            verdict = f"dropped after round {step.dropped[n]}"
        elif not valid:
            verdict = "invalid: " + (next((s.reason for s in ran if s.reason), "") or "no valid run")
        elif not _feasible(step.rows, n, bound):
            verdict = f"over the p99 bound ({bound:g} ms)"
        else:
            verdict = "not the best of the step"
        ratio = Interval(1.0, 1.0, 1.0, len(valid)) if n == "inc" else interval(step.rows.ratios(n, "inc", t.objective))
        med = step.rows.median
        out.append(Trial(i, step.knob, k, ratio, med(n, Sample.throughput), med(n, Sample.worst_p99), len(ran), _feasible(step.rows, n, bound), verdict, confirmed))
    return out
