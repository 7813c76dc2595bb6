"""Quality metrics by output kind: cosine and rank agreement for embeddings, top-1 agreement for classifiers,
the verdict against thresholds, and the gate lines that name the threshold which would pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.core.config import QualityConfig
from pipeline.core.quality import judge, measure, pairwise_similarities, rank_agreement, round_down, rows
from pipeline.parity.report import failures


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


REF = [unit(np.random.default_rng(0).normal(size=(b, 16))) for b in (4, 8)]


def test_identical_embeddings_are_perfect_and_rows_pool_samples() -> None:
    assert rows(REF).shape == (12, 16)
    m = measure("embedding", REF, [r.copy() for r in REF])
    assert m["cosine_min"] == pytest.approx(1.0) and m["cosine_mean"] == pytest.approx(1.0) and m["rank_agreement"] == pytest.approx(1.0)
    assert judge("embedding", m, QualityConfig(cosine_min=0.999, rank_agreement=0.999)).passed


def test_one_broken_row_shows_in_cosine_min_not_mean() -> None:
    art = [r.copy() for r in REF]
    art[1][3] = -art[1][3]  # one row flipped: cosine -1
    m = measure("embedding", REF, art)
    assert m["cosine_min"] == pytest.approx(-1.0) and m["cosine_mean"] == pytest.approx((11 - 1) / 12)
    v = judge("embedding", m, QualityConfig(cosine_min=0.98, cosine_mean=0.5))
    assert not v.passed and set(v.failed) == {"cosine_min"}


def test_rank_agreement_sees_reordered_neighbours_that_cosine_to_the_reference_misses() -> None:
    """Noise that keeps every row close to its reference can still reorder which rows are most alike."""
    rng = np.random.default_rng(1)
    base = unit(np.ones((10, 16)) + 0.05 * rng.normal(size=(10, 16)))  # rows all alike: their differences are small
    noisy = unit(base + 0.02 * rng.normal(size=base.shape))
    m = measure("embedding", [base], [noisy])
    assert m["cosine_min"] > 0.99 and m["rank_agreement"] < 0.8  # 0.994 and 0.69
    assert pairwise_similarities(base).shape == (45,)
    assert rank_agreement(base[:2], noisy[:2]) is None  # one pair ranks nothing


def test_classifier_top1_agreement() -> None:
    ref = [np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 0.1, 0.2], [5.0, 0.0, 0.0]])]
    art = [np.array([[2.5, 1.0, 0.0], [0.0, 0.9, 1.0], [0.0, 0.1, 0.3], [4.0, 0.0, 0.0]])]
    m = measure("classifier", ref, art)
    assert m == {"top1_agreement": 0.75}
    v = judge("classifier", m, QualityConfig(top1_agreement=0.98, cosine_min=0.99))  # cosine is not a classifier metric
    assert v.thresholds == {"top1_agreement": 0.98} and not v.passed


def test_nonfinite_output_fails_every_set_threshold() -> None:
    art = [r.copy() for r in REF]
    art[0][0, 0] = np.nan
    v = judge("embedding", measure("embedding", REF, art), QualityConfig(cosine_min=0.5, rank_agreement=0.5))
    assert set(v.failed) == {"cosine_min", "rank_agreement"} and math.isnan(v.failed["cosine_min"][0])
    assert v.to_json()["metrics"]["cosine_min"] is None  # JSON has no NaN


@pytest.mark.parametrize("x", [0.96923, 0.99987, 0.5, 0.123456789])
def test_round_down_is_a_threshold_the_value_meets(x: float) -> None:
    assert round_down(x) <= x and x - round_down(x) < 1e-3 * x


def test_gate_lines_name_each_failing_metric_and_the_passing_value() -> None:
    v = judge("embedding", {"cosine_min": 0.96923, "cosine_mean": 0.991, "rank_agreement": 0.97}, QualityConfig(cosine_min=0.98, cosine_mean=0.99, rank_agreement=0.98))
    out = {"passed": False, "elementwise_passed": True, "quality": v.to_json()}
    lines = failures({"artifacts": {"int8": {"status": "failed", "config_key": "parity.int8", "outputs": {"embedding": out}}}})
    assert lines == [
        "int8/embedding: embedding cosine_min=0.9692 < parity.int8.quality.cosine_min=0.98; passes with parity.int8.quality.cosine_min=0.9692",
        "int8/embedding: embedding rank_agreement=0.9700 < parity.int8.quality.rank_agreement=0.98; passes with parity.int8.quality.rank_agreement=0.97",
    ]
