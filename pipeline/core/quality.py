"""Quality of a model's outputs against a reference, by what each output means (model.output_kinds).

Elementwise tolerances say how far numbers moved; they cannot say whether an embedding model still ranks
neighbours the same way, or a classifier still picks the same class. INT8 moves every number a little, so these
metrics are what the parity gate (pipeline/parity/) and the int8 stage's automatic fallback (pipeline/convert/)
judge it by. Every metric is an "at least" one: higher is better.

- embedding: each row's cosine similarity to the reference row (``cosine_min``, ``cosine_mean``), and
  ``rank_agreement``, the Spearman correlation between the reference's and the artifact's pairwise cosine
  similarities over all rows (the order of neighbours that a search or a deduplication relies on);
- classifier: ``top1_agreement``, the share of rows whose argmax matches the reference's.

A row is one entry of the batch axis; rows of every sample are pooled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.core.config import OutputKind, QualityConfig

METRICS = {OutputKind.embedding: ("cosine_min", "cosine_mean", "rank_agreement"), OutputKind.classifier: ("top1_agreement",)}
_EPS = 1e-12


def rows(outputs: Sequence[np.ndarray]) -> np.ndarray:
    """Pool samples' outputs into rows: ``[n, features]`` in float64 (a 1-D output is one row per sample)."""
    parts = [np.asarray(o, dtype=np.float64) for o in outputs]
    parts = [p.reshape(1, -1) if p.ndim <= 1 else p.reshape(p.shape[0], -1) for p in parts]
    return np.concatenate(parts) if parts else np.zeros((0, 0))


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
    a, b = pairwise_similarities(ref), pairwise_similarities(art)
    if np.ptp(a) == 0 or np.ptp(b) == 0:  # every pair equally similar: no ranking to agree on
        return 1.0 if np.allclose(a, b) else 0.0
    from scipy.stats import spearmanr  # scipy is slow to import; only quality checks need it

    return float(spearmanr(a, b).statistic)


def measure(kind: OutputKind | str, ref: Sequence[np.ndarray], art: Sequence[np.ndarray]) -> dict[str, float | None]:
    """The metrics of ``kind`` for an artifact's outputs against the reference's, sample by sample."""
    r, a = rows(ref), rows(art)
    if r.shape != a.shape:
        raise ValueError(f"artifact rows {a.shape} do not match reference rows {r.shape}")
    if not np.isfinite(a).all():
        return dict.fromkeys(METRICS[OutputKind(kind)], math.nan)
    if OutputKind(kind) == OutputKind.classifier:
        return {"top1_agreement": float(np.mean(r.argmax(axis=1) == a.argmax(axis=1))) if r.size else None}
    cos = cosine_rows(r, a)
    return {"cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()), "rank_agreement": rank_agreement(r, a)}


@dataclass
class QualityVerdict:
    """One output's quality: its kind, the metrics, and the thresholds it failed ({metric: (value, threshold)})."""

    kind: str
    metrics: dict[str, float | None]
    thresholds: dict[str, float] = field(default_factory=dict)
    failed: dict[str, tuple[float | None, float]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failed

    def to_json(self) -> dict:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(float(x), 6)

        return {"kind": self.kind, "metrics": {k: num(v) for k, v in self.metrics.items()}, "thresholds": self.thresholds,
                "passed": self.passed, "failed": {k: {"value": num(v), "threshold": t} for k, (v, t) in self.failed.items()}}


def judge(kind: OutputKind | str, metrics: Mapping[str, float | None], limits: QualityConfig) -> QualityVerdict:
    """Compare ``metrics`` with the thresholds ``limits`` sets for this kind (null thresholds are not checked).

    A metric that could not be computed (None: too few rows) or is NaN fails a threshold set for it.
    """
    thresholds = {m: float(getattr(limits, m)) for m in METRICS[OutputKind(kind)] if getattr(limits, m) is not None}
    failed = {}
    for m, t in thresholds.items():
        v = metrics.get(m)
        if v is None or not math.isfinite(v) or v < t:
            failed[m] = (v, t)
    return QualityVerdict(str(OutputKind(kind)), dict(metrics), thresholds, failed)


def round_down(x: float, digits: int = 4) -> float:
    """``x`` rounded *down* to ``digits`` significant digits: a printed "at least" threshold that ``x`` still meets."""
    if x <= 0 or not math.isfinite(x):
        return x
    exp = math.floor(math.log10(abs(x))) - digits + 1
    down = math.floor(x / 10.0**exp) * 10.0**exp
    text = float(f"{down:.{digits}g}")
    return text if text <= x else float(f"{down - 10.0**exp:.{digits}g}")
