"""The INT8 fallback's search: which quantized nodes stay FP32, and the rule that says when to stop.

A search that chooses nodes on some rows and stops as soon as the gate passes on those same rows fits them: the gate
metrics that decide (the worst row's cosine) come from a handful of rows, and a node that lifts the worst search row
need not lift any other. So the calibration rows are split again, by the held-out rule of pipeline/core/holdout.py with
``h = int8.fallback.validation``, into **search rows** and **validation rows**:

- the ranking reads the search rows only: the per-layer error of every quantized node (pipeline/convert/int8_errors.py),
  measured once on the all-INT8 model, a mean over rows and channels rather than one row's margin;
- a candidate keeps FP32 the k worst nodes of that ranking, one quantization from the cached ranges; k is found by
  bisection over 1..n-1 (n ranked nodes; k = n would be an FP32 model under an INT8 name), which takes about
  log2(n) quantizations where node-by-node trials take n;
- a candidate passes the **stop rule** when, for every threshold of ``parity.int8.quality`` and every judged output,
  the validation rows pass, and the search rows pass with only the gain the validation rows confirm. Every metric is
  "at least" and at most 1, so 1 - value is the error left; the search rows' error is credited as shrinking by no more
  than the factor the validation rows' error shrank:

      credited = min(s, 1 - (1 - s0) * (1 - v) / (1 - v0))   s, v: the candidate on the search / validation rows
                                                             s0, v0: the all-INT8 model (nothing chosen yet)

  Gains the search rows see beyond that are what the choice fitted to them. Every calibration row must pass (the search
  rows hold hard rows too), and no row that chose the nodes can pass the rule alone. The factor rather than a
  difference, because the error of two sets of rows shrinks in proportion as nodes are kept FP32 (the hard rows have
  more to lose). A validation error of 0 at the start (v0 = 1: nothing to confirm) credits the search rows in full.

The rule asks for more than passing: every metric must leave at least ``int8.fallback.min_margin`` of its error budget
(margin, below). The gate judges held-out rows, as many as the calibration rows, and a minimum over more rows is lower,
so a candidate that passes the search and validation rows by a hair fails at the gate (docs/int8.md has MiniLM's case).

Bisection assumes that more nodes kept FP32 never make the model worse; that is not strictly true (rounding errors also
cancel), so the k it returns passes the rule but need not be the smallest k that would. The held-out rows the parity
gate judges on are never read here: the stop rule is this stage's estimate, the gate's verdict is the one that counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import onnx_tools, quality
from pipeline.core.config import OutputKind, QualityConfig
from pipeline.core.errors import QuantizationError
from pipeline.core.holdout import Split

Feed = dict[str, np.ndarray]
RULE = (
    "every threshold of parity.int8.quality passes on the validation rows, and on the search rows credited only with "
    "the gain the validation rows confirm: min(s, 1 - (1 - s0) * (1 - v) / (1 - v0)), s0/v0 the all-INT8 model's values"
)


@dataclass(frozen=True)
class Judged:
    """One candidate's quality verdicts on the search rows and on the validation rows, by output."""

    search: dict[str, quality.QualityVerdict]
    validation: dict[str, quality.QualityVerdict]


class Judge:
    """Judges quantized models against the FP32 model on both parts of the split (FP32 outputs computed once)."""

    def __init__(self, fp32: Path, split: Split, kinds: Mapping[str, OutputKind], limits: QualityConfig, axes: Mapping[str, int] | None = None) -> None:
        sess = onnx_tools.session(fp32, "FP32 model")
        self._parts = {"search": split.calibration.feeds, "validation": split.holdout.feeds}
        self._ref = {p: [onnx_tools.run(sess, f, "FP32 model") for f in feeds] for p, feeds in self._parts.items()}
        first = self._ref["search"][0] if self._ref["search"] else {}
        self.kinds = {o: k for o, k in kinds.items() if o in first}
        self.limits = limits
        self.axes = dict(axes or {})
        for o in self.kinds:
            try:
                quality.vectors([r[o] for r in self._ref["search"]], self.axes.get(o, -1))
            except ValueError as e:
                raise QuantizationError(
                    f"output '{o}' cannot be judged along axis {self.axes.get(o, -1)}: {e}",
                    fix=f"set model.output_axes.{o} to its class or embedding axis ('+model.output_axes.{o}=<axis>')",
                ) from None

    def __call__(self, model: Path) -> Judged:
        sess = onnx_tools.session(model, "INT8 model")
        out: dict[str, dict[str, quality.QualityVerdict]] = {}
        for part, feeds in self._parts.items():
            got = [onnx_tools.run(sess, f, "INT8 model") for f in feeds]
            ref = self._ref[part]
            out[part] = {o: quality.judge(k, quality.measure(k, [r[o] for r in ref], [g[o] for g in got], self.axes.get(o, -1)), self.limits) for o, k in self.kinds.items()}
        return Judged(out["search"], out["validation"])


def _value(v: quality.QualityVerdict, metric: str) -> float:
    """A metric's value; one that could not be computed (None, NaN) counts as -1, below every threshold."""
    x = v.metrics.get(metric)
    return -1.0 if x is None or not math.isfinite(x) else float(x)


def credited(s: float, v: float, s0: float, v0: float) -> float:
    """The search rows' value with only the validated gain (module docstring): their error shrinks by at most the factor
    the validation rows' error shrank since the all-INT8 model."""
    return s if v0 >= 1 else min(s, 1 - (1 - s0) * (1 - v) / (1 - v0))


def checks(first: Judged, now: Judged, digits: int | None = 6) -> dict[str, dict[str, float]]:
    """The stop rule's numbers, per ``<output>.<metric>`` with a threshold: threshold, search, validation, credited."""

    def r(x: float) -> float:
        return x if digits is None else round(x, digits)

    out = {}
    for o, v in now.validation.items():
        for m, t in v.thresholds.items():
            s, val = _value(now.search[o], m), _value(v, m)
            s0, v0 = _value(first.search[o], m), _value(first.validation[o], m)
            out[f"{o}.{m}"] = {"threshold": t, "search": r(s), "validation": r(val), "credited": r(credited(s, val, s0, v0))}
    return out


def _left(x: float, t: float) -> float:
    """The share of the error budget ``1 - t`` that value ``x`` leaves: 1 - (1 - x) / (1 - t); >= 0 exactly when x >= t."""
    return 1 - (1 - x) / (1 - t) if t < 1 else (1.0 if x >= 1 else x - 1)


def _margin(first: Judged, now: Judged) -> float:
    return min((_left(min(c["validation"], c["credited"]), c["threshold"]) for c in checks(first, now, digits=None).values()), default=1.0)


def margin(first: Judged, now: Judged) -> float:
    """The rule's worst margin: the least share of a threshold's error budget (1 - threshold) that the validation or the
    credited value leaves; >= 0 passes. A share rather than a difference, so metrics with different thresholds compare."""
    return round(_margin(first, now), 6)


def passes(first: Judged, now: Judged, min_margin: float = 0.0) -> bool:
    """The stop rule (module docstring): every margin at least ``min_margin`` (``int8.fallback.min_margin``)."""
    return _margin(first, now) >= min_margin


def bisect(n: int, evaluate: Callable[[int], bool], budget: int) -> tuple[int | None, list[int]]:
    """The smallest k in 1..n-1 for which ``evaluate(k)`` is true, by bisection (assuming that once true it stays true
    for larger k), in at most ``budget`` evaluations; returns (the smallest passing k evaluated or None, every k evaluated)."""
    lo, hi, best = 0, n, None
    tried: list[int] = []
    while hi - lo > 1 and len(tried) < budget:
        k = (lo + hi) // 2
        tried.append(k)
        if evaluate(k):
            hi, best = k, k
        else:
            lo = k
    return best, tried


def to_json(j: Judged) -> dict[str, Any]:
    """Both parts' verdicts as a report carries them."""
    return {"search": {o: v.to_json() for o, v in j.search.items()}, "validation": {o: v.to_json() for o, v in j.validation.items()}}
