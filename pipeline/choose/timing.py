"""Candidate precisions timed in this process, in paired rounds: the bench's method, applied to ONNX files.

This machine's speed drifts by tens of percent within a minute, so two candidates timed a minute apart can be
ranked either way. Each round therefore times every candidate back to back, a burst each (``choose.burst_ms``), in
an order that rotates from round to round: a slowdown hits all of them within about a second and
cancels in the round's ratios. Each candidate's speedup over the reference (fp32) is the median over rounds with a
90% percentile-bootstrap interval (:func:`pipeline.stats.estimate.estimate`), and rounds stop by the bench's
:class:`~pipeline.stats.estimate.StopRule` once every interval is narrow, or the budget is spent.

Two measurements per candidate and round, one per variant, each with that variant's ONNX Runtime settings:
batch-1 p50 (the latency variant) and best-batch inferences/s (the throughput variant; each candidate at its own
best batch size, found once before the rounds, up to the variant's max_batch_size).

Pairing cancels a slowdown that hits both sides of a pair; it does not cancel contention that lands on one side.
Another process taking a core slows a candidate that runs ONNX Runtime's threads in parallel several times over,
so a hog during the reference's burst reads as a speedup of the candidate. Every burst therefore runs inside a
contention gauge (pipeline/core/contention.py), and each round's ratio is weighted by how quiet both of its bursts
were (:func:`quiet_weight`). Rounds count by their weights: the stop rule waits for ``choose.min_rounds`` rounds'
worth of quiet ones, and an estimate whose rounds are worth fewer (contention throughout) is marked untrusted,
which the decision never ships on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.stats.ort import ort_session, percentiles
from pipeline.stats.estimate import Estimate, StopRule, estimate
from pipeline.stats.ort import same_shape_batches
from pipeline.stats.ort import OrtSettings
from pipeline.core.config import ChooseConfig
from pipeline.core.contention import Gauge

Feed = dict[str, np.ndarray]
Hook = Callable[[str, str, int], AbstractContextManager[object]]  # (candidate, "latency"/"throughput", round) -> around a burst

# Gauge readings up to this share are a quiet machine (both sources read 0.00-0.02 idle, about 0.4-0.5 under one
# busy process on 2 cores); only contention above it costs weight.
QUIET_SHARE = 0.05
# A round's weight falls as (1 - excess contention)^8: one hog on 2 cores (about 0.45 above quiet) makes a round
# worth under 1% of a quiet one, a few percent of background work costs a few percent of weight.
WEIGHT_POWER = 8


def quiet_weight(*shares: float) -> float:
    """A round's weight from the contention of the bursts it compares (the worst of them counts)."""
    excess = max(0.0, max(shares, default=0.0) - QUIET_SHARE)
    return (1.0 - min(excess, 0.99)) ** WEIGHT_POWER


@dataclass
class Round:
    """One round: each candidate's batch-1 p50 (ms) and best-batch inferences/s, in the order they ran, and how
    contended the CPU was during each of those bursts (0 quiet .. 1)."""

    index: int
    order: list[str]
    p50_ms: dict[str, float] = field(default_factory=dict)
    infer_s: dict[str, float] = field(default_factory=dict)
    p50_contention: dict[str, float] = field(default_factory=dict)
    infer_contention: dict[str, float] = field(default_factory=dict)

    def weight(self, what: str, reference: str, c: str) -> float:
        """How much this round's ``c``/``reference`` ratio counts for ``what`` (p50_ms or infer_s)."""
        seen = self.p50_contention if what == "p50_ms" else self.infer_contention
        return quiet_weight(seen.get(reference, 0.0), seen.get(c, 0.0))


@dataclass
class Timing:
    """The rounds, each candidate's best batch, why the rounds stopped; estimates derive from the rounds."""

    reference: str
    candidates: list[str]
    best_batch: dict[str, int]
    rounds: list[Round] = field(default_factory=list)
    stopped: str = ""
    min_quiet: float = 0.0  # quiet-round equivalents an estimate needs to be trusted (choose.min_rounds)
    gauge: str = ""  # the contention gauge's source (psi, cpu_times)

    def _speedup(self, what: str, c: str) -> Estimate:
        ref = self.reference
        ratios = [r.p50_ms[ref] / r.p50_ms[c] if what == "p50_ms" else r.infer_s[c] / r.infer_s[ref] for r in self.rounds]
        e = estimate(ratios, [r.weight(what, ref, c) for r in self.rounds])
        if e.weight is not None and e.weight < self.min_quiet:
            e.untrusted = f"the CPU was contended: {e.n} rounds are worth {e.weight:.1f} quiet ones, {self.min_quiet:g} needed (choose.min_rounds)"
        return e

    def latency_speedup(self, c: str) -> Estimate:
        """Reference p50 over the candidate's, per round (weighted by quiet): above 1 is faster."""
        return self._speedup("p50_ms", c)

    def throughput_speedup(self, c: str) -> Estimate:
        """The candidate's best-batch inferences/s over the reference's, per round (weighted by quiet): above 1 is faster."""
        return self._speedup("infer_s", c)

    def estimates(self) -> list[Estimate]:
        others = [c for c in self.candidates if c != self.reference]
        return [e for c in others for e in (self.latency_speedup(c), self.throughput_speedup(c))]

    def median(self, what: str, c: str) -> float:
        return float(np.median([getattr(r, what)[c] for r in self.rounds]))

    def to_json(self) -> dict[str, Any]:
        per = {
            c: {
                "p50_ms": self.median("p50_ms", c),
                "best_batch": self.best_batch[c],
                "best_batch_infer_s": self.median("infer_s", c),
                **({} if c == self.reference else {"latency_speedup": self.latency_speedup(c).to_json(), "throughput_speedup": self.throughput_speedup(c).to_json()}),
            }
            for c in self.candidates
        }
        rounds = [
            {
                "round": r.index,
                "order": r.order,
                "p50_ms": r.p50_ms,
                "infer_s": r.infer_s,
                "contention": {"p50_ms": _rounded(r.p50_contention), "infer_s": _rounded(r.infer_contention)},
            }
            for r in self.rounds
        ]
        return {"reference": self.reference, "stopped": self.stopped, "gauge": self.gauge, "min_quiet_rounds": self.min_quiet, "candidates": per, "rounds": rounds}


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in d.items()}


def _burst_p50(sess: Any, rows: list[Feed], seconds: float, least: int = 5) -> float:  # noqa: ANN401 - onnxruntime type
    """Batch-1 p50 (ms) of back-to-back runs for ``seconds`` (at least ``least``), after 2 untimed ones."""
    for r in rows[:2]:
        sess.run(None, r)
    times: list[float] = []
    t0 = time.perf_counter()
    while len(times) < least or time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        sess.run(None, rows[len(times) % len(rows)])
        times.append(time.perf_counter() - t)
    return percentiles(times).p50_ms


def _burst_infer_s(sess: Any, batches: list[Feed], seconds: float, least: int = 2) -> float:  # noqa: ANN401 - onnxruntime type
    """Inferences/s of back-to-back batches for ``seconds`` (at least ``least`` runs), after one untimed run."""
    sess.run(None, batches[0])
    b = next(iter(batches[0].values())).shape[0]
    n, t0 = 0, time.perf_counter()
    while n < least or time.perf_counter() - t0 < seconds:
        sess.run(None, batches[n % len(batches)])
        n += 1
    return n * b / (time.perf_counter() - t0)


def _gauged(hook: Hook, c: str, variant: str, i: int, burst: Callable[[], float]) -> tuple[float, float, str]:
    """(the burst's figure, the contention during it, the gauge's source)."""
    with hook(c, variant, i), Gauge() as g:
        value = burst()
    assert g.contention is not None
    return value, g.contention.share, g.contention.source


def measure(
    files: dict[str, Path],
    rows: list[Feed],
    latency: OrtSettings,
    throughput: OrtSettings,
    max_batch: int,
    cfg: ChooseConfig,
    progress: Callable[[str], None] = lambda _: None,
    around_burst: Hook = lambda c, v, i: nullcontext(),
) -> Timing:
    """Time every candidate in ``files`` (precision -> ONNX; the first is the reference) in paired rounds.

    ``around_burst(candidate, variant, round)``: a context each timed burst runs in (tests start load there).
    """
    names = list(files)
    lat = {c: ort_session(p, latency) for c, p in files.items()}
    thr = {c: ort_session(p, throughput) for c, p in files.items()}
    sizes = [b for b in cfg.batch_sizes if max_batch <= 0 or b <= max_batch] or [1]
    batches = {b: same_shape_batches(rows, b) for b in sizes}
    burst = cfg.burst_ms / 1e3
    best: dict[str, int] = {}
    for c in names:  # warm both sessions at every shape they will see, then pick the candidate's best batch
        _burst_p50(lat[c], rows, burst)
        speed = {b: _burst_infer_s(thr[c], batches[b], burst) for b in sizes}
        best[c] = max(sizes, key=speed.__getitem__)
    timing = Timing(names[0], names, best, min_quiet=float(cfg.min_rounds))
    rule = StopRule(cfg.min_rounds, cfg.max_rounds, cfg.target_half_width, cfg.budget_s, "choose.max_rounds", "choose.budget_s", by_weight=True)
    t0 = time.perf_counter()
    while True:
        i = len(timing.rounds)
        k = i % len(names)
        r = Round(i, names[k:] + names[:k])  # each candidate takes each place in turn
        for c in r.order:
            r.p50_ms[c], r.p50_contention[c], timing.gauge = _gauged(around_burst, c, "latency", i, partial(_burst_p50, lat[c], rows, burst))
        for c in r.order:
            r.infer_s[c], r.infer_contention[c], timing.gauge = _gauged(around_burst, c, "throughput", i, partial(_burst_infer_s, thr[c], batches[best[c]], burst))
        timing.rounds.append(r)
        busy = max([*r.p50_contention.values(), *r.infer_contention.values()])
        progress(
            f"round {i + 1}: "
            + ", ".join(f"{c} {r.p50_ms[c]:.2f} ms / {r.infer_s[c]:.0f} infer/s" for c in names)
            + (f" (contended: {busy:.0%} by {timing.gauge})" if busy > QUIET_SHARE else "")
        )
        if (why := rule.reason(len(timing.rounds), timing.estimates(), time.perf_counter() - t0)) is not None:
            timing.stopped = why
            return timing
