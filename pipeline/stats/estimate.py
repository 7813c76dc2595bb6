"""Headline numbers as estimates with a 90% interval over rounds, and when rounds may stop.

Each round of the bench yields one ratio from two measurements taken next to each other (see
bench/rounds/pairing.py), so a change of machine speed that slows both sides of a pair equally cancels in that
round's ratio. The estimate is the median of the rounds' ratios; the interval is a percentile
bootstrap of that median over rounds (scipy.stats.bootstrap), so rounds that a speed change split
unevenly widen the interval instead of being thrown away. Rounds with an invalid perf_analyzer
measurement give no ratio and are left out (counted in ``left_out``).

Why the median and the percentile bootstrap: a round whose speed changed between its two halves
is an outlier in either direction, and the median ignores a few of those where a mean would
follow them. BCa needs a jackknife that a median of 5-12 values makes unstable; the percentile
interval does not. Simulated on log-normal rounds it covers 86-91% at 5-16 rounds (the exact
order-statistic interval covers >= 90% but needs about half again as many rounds for the same
width); bench.min/max rounds keep the count in that range.

Rounds may carry weights (bench/rounds/results.py weighs c=1 rounds by how contended their in-process gauge was); the
estimate is then the weighted median and the bootstrap resamples rounds together with their weights. A
weight that does not depend on the ratio (as a slowdown that hits both sides alike does not) leaves the
median where it is and only changes how much each round counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.90
_RESAMPLES = 4000
_SEED = 0  # the same rounds give the same interval: a report rendered twice says the same


@dataclass
class Estimate:
    """A headline number: the median over rounds and its 90% interval (None where there is no number or no interval).

    ``n``: rounds that gave a value; ``left_out``: rounds without one (an invalid perf_analyzer window).
    ``weight``: the rounds' summed weights when the estimate was weighted (how many quiet rounds they are worth).
    ``untrusted``: why the interval cannot be trusted (empty: it can); it is then kept in the record, never shown.
    """

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    left_out: int = 0
    weight: float | None = None
    untrusted: str = ""

    @property
    def has_interval(self) -> bool:
        return self.value is not None and self.low is not None and self.high is not None

    @property
    def half_width(self) -> float | None:
        """The larger side of the interval as a share of the estimate (0.03 = the interval is within +-3%)."""
        value, low, high = self.value, self.low, self.high
        if value is None or low is None or high is None or not value:
            return None
        return max(value - low, high - value) / abs(value)

    def text(self, fmt: str = ".2f", unit: str = "x") -> str:
        """``1.05x (90% CI 1.03-1.07x, 8 rounds)``, ``n/a`` without a value, no interval when there is none."""
        if self.value is None:
            return "n/a"
        if self.untrusted:
            return f"{self.value:{fmt}}{unit} (untrusted: {self.untrusted}; no interval)"
        if not self.has_interval:
            return f"{self.value:{fmt}}{unit}" + (" (1 round, no interval)" if self.n == 1 else "")
        return f"{self.value:{fmt}}{unit} ({CONFIDENCE:.0%} CI {self.low:{fmt}}-{self.high:{fmt}}{unit}, {self.n} rounds)"

    def flat(self, name: str) -> dict[str, float | int | None]:
        """``name``, ``name_ci90_low``, ``name_ci90_high``, ``name_rounds``: scalar keys, as dvc metrics shows them."""
        tag = f"ci{CONFIDENCE * 100:.0f}"
        extra = {f"{name}_untrusted": True} if self.untrusted else {}
        return {name: self.value, f"{name}_{tag}_low": self.low, f"{name}_{tag}_high": self.high, f"{name}_rounds": self.n, **extra}

    @classmethod
    def from_flat(cls, d: dict, name: str) -> Estimate:
        tag = f"ci{CONFIDENCE * 100:.0f}"
        return cls(d.get(name), d.get(f"{name}_{tag}_low"), d.get(f"{name}_{tag}_high"), d.get(f"{name}_rounds") or 0)

    def to_json(self) -> dict:
        extra = ({} if self.weight is None else {"weight": round(self.weight, 3)}) | ({"untrusted": self.untrusted} if self.untrusted else {})
        return {"value": self.value, "low": self.low, "high": self.high, "confidence": CONFIDENCE, "rounds": self.n, "left_out": self.left_out, **extra}

    @classmethod
    def from_json(cls, d: dict) -> Estimate:
        return cls(d.get("value"), d.get("low"), d.get("high"), d.get("rounds", 0), d.get("left_out", 0), d.get("weight"), d.get("untrusted", ""))


def _weighted_median(x: np.ndarray, w: np.ndarray, axis: int = -1) -> np.ndarray:
    """Along ``axis``: the value at which the rounds' cumulative weight reaches half; where it reaches exactly half,
    the mean of that value and the next (so equal weights give numpy's median). Vectorized: the bootstrap calls it
    once for all its resamples (a Python call per resample took 80 ms an estimate)."""
    x, w = np.moveaxis(np.asarray(x, dtype=float), axis, -1), np.moveaxis(np.asarray(w, dtype=float), axis, -1)
    order = np.argsort(x, axis=-1, kind="stable")
    xs, cum = np.take_along_axis(x, order, -1), np.cumsum(np.take_along_axis(w, order, -1), axis=-1)
    half = cum[..., -1:] / 2
    i = np.minimum((cum < half).sum(axis=-1, keepdims=True), xs.shape[-1] - 1)  # the first reaching half (searchsorted)
    nxt = np.minimum(i + 1, xs.shape[-1] - 1)
    at, after = np.take_along_axis(xs, i, -1), np.take_along_axis(xs, nxt, -1)
    tie = (i + 1 < xs.shape[-1]) & np.isclose(np.take_along_axis(cum, i, -1), half)
    return np.where(tie, (at + after) / 2, at)[..., 0]


def estimate(values: Sequence[float | None], weights: Sequence[float] | None = None) -> Estimate:
    """The median of the rounds' ``values`` (None = no value: left out) with its 90% percentile-bootstrap interval.

    ``weights`` (one per round, > 0) make it a weighted median, resampled with the rounds they belong to.
    One value gives a number without an interval; none gives no number.
    """
    keep = [i for i, v in enumerate(values) if v is not None]
    x = np.asarray([values[i] for i in keep], dtype=float)
    left_out = len(values) - x.size
    if x.size == 0:
        return Estimate(None, n=0, left_out=left_out)
    total = None
    if weights is None:
        mid = float(np.median(x))
    else:
        w = np.asarray([weights[i] for i in keep], dtype=float)
        mid, total = float(_weighted_median(x, w)), float(w.sum())
    if x.size == 1:
        return Estimate(mid, n=1, left_out=left_out, weight=total)
    from scipy.stats import bootstrap  # scipy is slow to import; only the bench needs it

    if weights is None:
        ci = bootstrap((x,), np.median, confidence_level=CONFIDENCE, method="percentile", n_resamples=_RESAMPLES, rng=np.random.default_rng(_SEED)).confidence_interval
    else:
        ci = bootstrap(
            (x, w), _weighted_median, paired=True, vectorized=True, confidence_level=CONFIDENCE, method="percentile", n_resamples=_RESAMPLES, rng=np.random.default_rng(_SEED)
        ).confidence_interval
    # The resampled medians of two or three values can sit a hair off them: the interval holds the estimate.
    return Estimate(mid, min(float(ci.low), mid), max(float(ci.high), mid), int(x.size), left_out, total)


@dataclass
class StopRule:
    """When a group of rounds may stop: at least ``min_rounds`` with values, then as soon as every interval's
    half-width is within ``target`` (None: never early, the full profile), or ``budget_s`` has passed; always
    after ``max_rounds`` rounds.

    The rule reads the intervals' widths, never where they lie, so stopping early does not move the estimate.
    """

    min_rounds: int
    max_rounds: int
    target: float | None
    budget_s: float | None = None
    max_key: str = "bench.rounds.c1.max"  # the setting that caps them, for the reason given
    budget_key: str = "bench.rounds.budget_s"  # the setting that is their time budget
    by_weight: bool = False  # count rounds by their summed weights (quiet-round equivalents), not one each

    def reason(self, ran: int, estimates: Sequence[Estimate], elapsed_s: float) -> str | None:
        """Why the group stops now, or None to run another round."""
        if ran >= self.max_rounds:
            return f"{ran} rounds ({self.max_key})"
        counted = ((e.weight if self.by_weight and e.weight is not None else e.n) for e in estimates)
        if min(counted, default=0) < self.min_rounds:
            return None
        widths = [e.half_width for e in estimates]
        if self.target is not None and all(w is not None and w <= self.target for w in widths):
            worst = max(w for w in widths if w is not None)
            return f"interval within +-{worst:.1%} (target +-{self.target:.0%}) after {ran} rounds"
        if self.budget_s is not None and elapsed_s >= self.budget_s:
            return f"time budget of {self.budget_s:.0f} s spent after {ran} rounds ({self.budget_key})"
        return None
