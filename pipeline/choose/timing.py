"""Candidate precisions timed in this process, in paired rounds: the bench's method, applied to ONNX files.

This machine's speed drifts by tens of percent within a minute, so two candidates timed a minute apart can be
ranked either way. Each round therefore times every candidate back to back, a burst each (``choose.burst_ms``), in
an order that rotates from round to round: a slowdown hits all of them within about a second and
cancels in the round's ratios. Each candidate's speedup over the reference (fp32) is the median over rounds with a
90% percentile-bootstrap interval (:func:`pipeline.bench.estimate.estimate`), and rounds stop by the bench's
:class:`~pipeline.bench.estimate.StopRule` once every interval is narrow, or the budget is spent.

Two measurements per candidate and round, one per variant, each with that variant's ONNX Runtime settings:
batch-1 p50 (the latency variant) and best-batch inferences/s (the throughput variant; each candidate at its own
best batch size, found once before the rounds, up to the variant's max_batch_size).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.bench.baseline import ort_session, percentiles
from pipeline.bench.estimate import Estimate, StopRule, estimate
from pipeline.bench.inputs import same_shape_batches
from pipeline.bench.measured import OrtSettings
from pipeline.core.config import ChooseConfig

Feed = dict[str, np.ndarray]


@dataclass
class Round:
    """One round: each candidate's batch-1 p50 (ms) and best-batch inferences/s, in the order they ran."""

    index: int
    order: list[str]
    p50_ms: dict[str, float] = field(default_factory=dict)
    infer_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Timing:
    """The rounds, each candidate's best batch, why the rounds stopped; estimates derive from the rounds."""

    reference: str
    candidates: list[str]
    best_batch: dict[str, int]
    rounds: list[Round] = field(default_factory=list)
    stopped: str = ""

    def latency_speedup(self, c: str) -> Estimate:
        """Reference p50 over the candidate's, per round: above 1 is faster."""
        return estimate([r.p50_ms[self.reference] / r.p50_ms[c] for r in self.rounds])

    def throughput_speedup(self, c: str) -> Estimate:
        """The candidate's best-batch inferences/s over the reference's, per round: above 1 is faster."""
        return estimate([r.infer_s[c] / r.infer_s[self.reference] for r in self.rounds])

    def estimates(self) -> list[Estimate]:
        others = [c for c in self.candidates if c != self.reference]
        return [e for c in others for e in (self.latency_speedup(c), self.throughput_speedup(c))]

    def median(self, what: str, c: str) -> float:
        return float(np.median([getattr(r, what)[c] for r in self.rounds]))

    def to_json(self) -> dict[str, Any]:
        per = {c: {"p50_ms": self.median("p50_ms", c), "best_batch": self.best_batch[c], "best_batch_infer_s": self.median("infer_s", c),
                   **({} if c == self.reference else {"latency_speedup": self.latency_speedup(c).to_json(),
                                                      "throughput_speedup": self.throughput_speedup(c).to_json()})}
               for c in self.candidates}  # fmt: skip
        return {"reference": self.reference, "stopped": self.stopped, "candidates": per,
                "rounds": [{"round": r.index, "order": r.order, "p50_ms": r.p50_ms, "infer_s": r.infer_s} for r in self.rounds]}


def _burst_p50(sess: Any, rows: list[Feed], seconds: float, least: int = 5) -> float:  # noqa: ANN401 - onnxruntime type
    """Batch-1 p50 (ms) of back-to-back runs for ``seconds`` (at least ``least``), after 2 untimed ones."""
    for r in rows[:2]:
        sess.run(None, r)
    times, t0 = [], time.perf_counter()
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


def measure(
    files: dict[str, Path], rows: list[Feed], latency: OrtSettings, throughput: OrtSettings, max_batch: int, cfg: ChooseConfig,
    progress: Callable[[str], None] = lambda _: None,
) -> Timing:
    """Time every candidate in ``files`` (precision -> ONNX; the first is the reference) in paired rounds."""
    names = list(files)
    lat = {c: ort_session(p, latency) for c, p in files.items()}
    thr = {c: ort_session(p, throughput) for c, p in files.items()}
    sizes = [b for b in cfg.batch_sizes if max_batch <= 0 or b <= max_batch] or [1]
    batches = {b: same_shape_batches(rows, b) for b in sizes}
    burst = cfg.burst_ms / 1e3
    best = {}
    for c in names:  # warm both sessions at every shape they will see, then pick the candidate's best batch
        _burst_p50(lat[c], rows, burst)
        best[c] = max(sizes, key=lambda b, c=c: _burst_infer_s(thr[c], batches[b], burst))
    timing = Timing(names[0], names, best)
    rule = StopRule(cfg.min_rounds, cfg.max_rounds, cfg.target_half_width, cfg.budget_s, "choose.max_rounds")
    t0 = time.perf_counter()
    while True:
        i = len(timing.rounds)
        k = i % len(names)
        r = Round(i, names[k:] + names[:k])  # each candidate takes each place in turn
        for c in r.order:
            r.p50_ms[c] = _burst_p50(lat[c], rows, burst)
        for c in r.order:
            r.infer_s[c] = _burst_infer_s(thr[c], batches[best[c]], burst)
        timing.rounds.append(r)
        progress(f"round {i + 1}: " + ", ".join(f"{c} {r.p50_ms[c]:.2f} ms / {r.infer_s[c]:.0f} infer/s" for c in names))
        if (why := rule.reason(len(timing.rounds), timing.estimates(), time.perf_counter() - t0)) is not None:
            timing.stopped = why
            return timing
