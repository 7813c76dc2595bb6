"""Quality of a model's outputs against a reference, by what each output means (model.output_kinds).

Elementwise tolerances say how far numbers moved; they cannot say whether an embedding model still ranks
neighbours the same way, or a classifier still picks the same class. INT8 moves every number a little, so these
metrics are what the parity gate (pipeline/parity/) and the int8 stage's automatic fallback (pipeline/convert/)
judge it by. Every metric is an "at least" one: higher is better.

- embedding: each vector's cosine similarity to the reference vector (``cosine_min``, ``cosine_mean``), and
  ``rank_agreement``, the Spearman correlation between the reference's and the artifact's pairwise cosine
  similarities over all vectors (the order of neighbours that a search or a deduplication relies on);
- classifier: ``top1_agreement``, the share of positions whose argmax over the class axis matches the reference's
  (for ``[N, C]`` a position is a row; for ``[N, T, C]`` it is each of a row's T positions, as an OCR recognizer or a
  tagger predicts), and ``top1_agreement_rows``, the share of rows that agree at every position (reported, not gated).

The class or embedding axis is the last one unless ``model.output_axes`` names another for the output. A row is one
entry of the batch axis; rows of every sample are pooled. Every vector along the axis (each row, and each position of
a row) is judged on its own.

A reference can be unable to tell a broken artifact from a good one (:func:`degeneracy`): a classifier whose rows all
predict one class (top-1 agreement is 1.0 whatever the artifact does), or near-constant outputs that vary across the
rows by less than the artifact's error (the comparison cannot tell the inputs apart). Such a verdict is inconclusive, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.core.config import OutputKind, QualityConfig

METRICS = {OutputKind.embedding: ("cosine_min", "cosine_mean", "rank_agreement"), OutputKind.classifier: ("top1_agreement",)}
REPORTED = {OutputKind.embedding: (), OutputKind.classifier: ("top1_agreement_rows",)}
_EPS = 1e-12
# A reference whose every element moves by less than this share of its largest value across the rows is near-constant:
# an artifact error as large as that movement then says nothing (a broken artifact on varied rows still fails instead).
NEAR_CONSTANT = 0.01
# Pairwise similarities grow with the square of the vectors: [N, T, D] outputs are ranked over an even subset.
_RANK_VECTORS = 1000


def vectors(outputs: Sequence[np.ndarray], axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Pool samples' outputs into vectors along ``axis``: (``[n, features]`` in float64, the row each vector belongs to).

    A 0-D or 1-D output is one vector per sample. Raises ValueError when ``axis`` does not exist in an output.
    """
    parts, owner, row0 = [], [], 0
    for o in outputs:
        p = np.asarray(o, dtype=np.float64)
        if p.ndim <= 1:
            p = p.reshape(1, -1)
        if not -p.ndim <= axis < p.ndim:
            raise ValueError(f"axis {axis} does not exist in an output of shape {p.shape}")
        if axis % p.ndim == 0:
            raise ValueError(f"axis {axis} is the batch axis of an output of shape {p.shape}")
        moved = np.moveaxis(p, axis, -1)
        per_row = int(np.prod(moved.shape[1:-1], dtype=np.int64))
        parts.append(moved.reshape(-1, moved.shape[-1]))
        owner.append(np.repeat(np.arange(row0, row0 + p.shape[0]), per_row))
        row0 += p.shape[0]
    if not parts:
        return np.zeros((0, 0)), np.zeros(0, dtype=np.int64)
    return np.concatenate(parts), np.concatenate(owner)


def rows(outputs: Sequence[np.ndarray]) -> np.ndarray:
    """Pool samples' outputs into rows: ``[n, features]`` in float64 (a 1-D output is one row per sample).

    An output whose batch is not on axis 0 (a recurrent state ``[2, N, H]``) gives rows of different widths per
    sample; it is pooled as vectors along its last axis instead.
    """
    parts = [np.asarray(o, dtype=np.float64) for o in outputs]
    flat = [p.reshape(1, -1) if p.ndim <= 1 else p.reshape(p.shape[0], -1) for p in parts]
    if len({f.shape[1] for f in flat}) > 1:
        flat = [p.reshape(-1, p.shape[-1]) for p in parts]
    return np.concatenate(flat) if flat else np.zeros((0, 0))


def cosine_rows(ref: np.ndarray, art: np.ndarray) -> np.ndarray:
    """Cosine similarity of each artifact row to its reference row (two zero rows count as identical)."""
    num = (ref * art).sum(axis=1)
    den = np.linalg.norm(ref, axis=1) * np.linalg.norm(art, axis=1)
    both_zero = (np.linalg.norm(ref, axis=1) < _EPS) & (np.linalg.norm(art, axis=1) < _EPS)
    return np.where(both_zero, 1.0, num / np.maximum(den, _EPS))


def pairwise_similarities(x: np.ndarray) -> np.ndarray:
    """The upper triangle (i < j) of the rows' cosine-similarity matrix."""
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), _EPS)
    sims = unit @ unit.T
    return sims[np.triu_indices(x.shape[0], k=1)]


def rank_agreement(ref: np.ndarray, art: np.ndarray) -> float | None:
    """Spearman correlation of the pairwise similarities (None with fewer than 3 rows: fewer than 3 pairs)."""
    if ref.shape[0] < 3:
        return None
    if ref.shape[0] > _RANK_VECTORS:
        pick = np.linspace(0, ref.shape[0] - 1, _RANK_VECTORS).round().astype(int)
        ref, art = ref[pick], art[pick]
    a, b = pairwise_similarities(ref), pairwise_similarities(art)
    if np.ptp(a) == 0 or np.ptp(b) == 0:  # every pair equally similar: no ranking to agree on
        return 1.0 if np.allclose(a, b) else 0.0
    from scipy.stats import spearmanr  # scipy is slow to import; only quality checks need it

    return float(spearmanr(a, b).statistic)


def measure(kind: OutputKind | str, ref: Sequence[np.ndarray], art: Sequence[np.ndarray], axis: int = -1) -> dict[str, float | None]:
    """The metrics of ``kind`` for an artifact's outputs against the reference's, sample by sample, along ``axis``.

    Raises ValueError when the artifact's outputs do not have the reference's shape, or ``axis`` does not fit them.
    """
    r, owner = vectors(ref, axis)
    a, _ = vectors(art, axis)
    if r.shape != a.shape:
        raise ValueError(f"artifact vectors {a.shape} do not match reference vectors {r.shape}")
    k = OutputKind(kind)
    if not np.isfinite(a).all():
        return dict.fromkeys(METRICS[k] + REPORTED[k], math.nan)
    if k == OutputKind.classifier:
        if not r.size:
            return {"top1_agreement": None, "top1_agreement_rows": None}
        agree = r.argmax(axis=1) == a.argmax(axis=1)
        row_agrees = np.bincount(owner, weights=~agree, minlength=int(owner.max()) + 1) == 0
        return {"top1_agreement": float(agree.mean()), "top1_agreement_rows": float(row_agrees.mean())}
    cos = cosine_rows(r, a)
    return {"cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()), "rank_agreement": rank_agreement(r, a)}


@dataclass(frozen=True)
class Coverage:
    """What the reference rows let a comparison see: how many rows, the classes they cover, how much they vary.

    ``spread``: the largest range across rows of any one output element (0 when the output never changes);
    ``error``: the artifact's largest absolute difference from the reference. ``one_class``: why top-1 agreement
    cannot judge (every row predicts one class), ``near_constant``: why no comparison can (the error is as large as
    the reference's movement); None where they can.
    """

    rows: int
    spread: float
    error: float
    classes: int | None = None  # distinct reference classes over all positions (classifiers)
    class_axis_size: int | None = None
    one_class: str | None = None
    near_constant: str | None = None

    @property
    def reasons(self) -> list[str]:
        return [r for r in (self.one_class, self.near_constant) if r]

    def blocking(self, thresholds: Iterable[str] = ()) -> list[str]:
        """The reasons that void a verdict judged by ``thresholds`` (the elementwise check alone: none given)."""
        return [r for r in (self.one_class if "top1_agreement" in set(thresholds) else None, self.near_constant) if r]

    @property
    def judgeable(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict:
        d = {"rows": self.rows, "spread": float(self.spread), "error": float(self.error), "reasons": self.reasons}
        return d | ({"classes_covered": self.classes, "classes": self.class_axis_size} if self.classes is not None else {})


def degeneracy(ref: Sequence[np.ndarray], art: Sequence[np.ndarray], kind: OutputKind | str | None = None, axis: int = -1) -> Coverage:
    """Whether the reference rows can tell this artifact's outputs from a broken artifact's (see the module docstring)."""
    r, a = rows(ref), rows(art)
    n = int(r.shape[0])
    err = float(np.abs(a - r).max()) if r.size and r.shape == a.shape and np.isfinite(a).all() else math.inf
    spread = float(np.ptp(r, axis=0).max()) if n >= 2 and r.size else 0.0
    one_class = near_constant = None
    classes = size = None
    if kind is not None and OutputKind(kind) == OutputKind.classifier and r.size:
        v, _ = vectors(ref, axis)
        picked = v.argmax(axis=1)
        classes, size = int(np.unique(picked).size), int(v.shape[1])
        if classes == 1 and size > 1:
            one_class = f"every one of the {n} reference rows predicts class {int(picked[0])} (of {size}): top-1 agreement is 1.0 whatever the artifact predicts elsewhere"
    scale = float(np.abs(r).max()) if r.size else 0.0
    if n >= 2 and 0 < spread <= min(err, NEAR_CONSTANT * scale):
        near_constant = (
            f"the reference is near-constant: across its {n} rows each element varies by at most {spread:.3g} "
            f"({spread / scale:.2%} of its largest value {scale:.3g}), no more than the artifact's error {err:.3g}, "
            "so the comparison cannot tell the inputs apart"
        )
    return Coverage(n, spread, err, classes, size, one_class, near_constant)


@dataclass
class QualityVerdict:
    """One output's quality: its kind, the metrics, and the thresholds it failed ({metric: (value, threshold)})."""

    kind: str
    metrics: dict[str, float | None]
    thresholds: dict[str, float] = field(default_factory=dict)
    failed: dict[str, tuple[float | None, float]] = field(default_factory=dict)
    coverage: Coverage | None = None  # None: not looked at (the int8 search's rows)

    @property
    def judgeable(self) -> bool:
        """The reference rows can judge the thresholds set (a reason that voids no set threshold is only reported)."""
        return self.coverage is None or not self.coverage.blocking(self.thresholds)

    @property
    def passed(self) -> bool:
        """Every threshold met, on reference rows that can tell (an inconclusive verdict is not a pass)."""
        return not self.failed and self.judgeable

    def to_json(self) -> dict:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(float(x), 6)

        return {
            "kind": self.kind,
            "metrics": {k: num(v) for k, v in self.metrics.items()},
            "thresholds": self.thresholds,
            "passed": self.passed,
            "failed": {k: {"value": num(v), "threshold": t} for k, (v, t) in self.failed.items()},
            **({"coverage": {**self.coverage.to_json(), "judgeable": self.judgeable, "blocking": self.coverage.blocking(self.thresholds)}} if self.coverage is not None else {}),
        }


def judge(kind: OutputKind | str, metrics: Mapping[str, float | None], limits: QualityConfig, coverage: Coverage | None = None) -> QualityVerdict:
    """Compare ``metrics`` with the thresholds ``limits`` sets for this kind (null thresholds are not checked).

    A metric that could not be computed (None: too few rows) or is NaN fails a threshold set for it. With ``coverage``
    (:func:`degeneracy`), a reference that cannot judge makes the verdict inconclusive.
    """
    thresholds = {m: float(getattr(limits, m)) for m in METRICS[OutputKind(kind)] if getattr(limits, m) is not None}
    failed = {}
    for m, t in thresholds.items():
        v = metrics.get(m)
        if v is None or not math.isfinite(v) or v < t:
            failed[m] = (v, t)
    return QualityVerdict(str(OutputKind(kind)), dict(metrics), thresholds, failed, coverage)


def round_down(x: float, digits: int = 4) -> float:
    """``x`` rounded *down* to ``digits`` significant digits: a printed "at least" threshold that ``x`` still meets."""
    if x <= 0 or not math.isfinite(x):
        return x
    exp = math.floor(math.log10(abs(x))) - digits + 1
    down = math.floor(x / 10.0**exp) * 10.0**exp
    text = float(f"{down:.{digits}g}")
    return text if text <= x else float(f"{down - 10.0**exp:.{digits}g}")
