"""Quality metrics by output kind: cosine and rank agreement for embeddings, top-1 agreement for classifiers,
the verdict against thresholds, and the gate lines that name the threshold which would pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.core.config import QualityConfig
from pipeline.core.quality import degeneracy, judge, measure, pairwise_similarities, rank_agreement, round_down, rows, vectors
from pipeline.parity.report import failures
from pipeline.records.parity import ArtifactResult


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
    assert m == {"top1_agreement": 0.75, "top1_agreement_rows": 0.75}  # [N, C]: a position is a row
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
    lines = failures({"int8": ArtifactResult.from_json({"status": "failed", "config_key": "parity.int8", "outputs": {"embedding": out}})})
    assert lines == [
        "int8/embedding: embedding cosine_min=0.9692 < parity.int8.quality.cosine_min=0.98; passes with parity.int8.quality.cosine_min=0.9692",
        "int8/embedding: embedding rank_agreement=0.9700 < parity.int8.quality.rank_agreement=0.98; passes with parity.int8.quality.rank_agreement=0.97",
    ]


def sequence_logits(rows: int = 8, steps: int = 40, classes: int = 30, seed: int = 0) -> np.ndarray:
    """[N, T, C] logits with a clear winner per position, as an OCR recognizer's."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, steps, classes))
    x[np.arange(rows)[:, None], np.arange(steps)[None, :], rng.integers(0, classes, (rows, steps))] += 5.0
    return x


def test_sequence_classifier_is_judged_per_position_not_over_the_flattened_row() -> None:
    ref = sequence_logits()
    art = ref + np.random.default_rng(1).normal(scale=0.01, size=ref.shape)
    art[:, :, 0] += 50.0 * (np.arange(ref.shape[1]) == 3)  # rows' one largest value moves: a flattened argmax disagrees
    m = measure("classifier", [ref], [art])
    # 39 of 40 positions agree in every row; over rows, none agrees at every position.
    assert m["top1_agreement"] == pytest.approx(39 / 40, abs=0.01) and m["top1_agreement_rows"] == 0.0
    flat = float(np.mean(rows([ref]).argmax(axis=1) == rows([art]).argmax(axis=1)))
    assert flat == 0.0  # what flattening each row reported: a pass turned into 0% (and the reverse can happen)


def test_a_sequence_classifier_whose_positions_agree_passes_and_one_in_ten_wrong_fails() -> None:
    ref = sequence_logits()
    same = ref * 0.9 + 0.01
    limits = QualityConfig(top1_agreement=0.98)
    assert judge("classifier", measure("classifier", [ref], [same]), limits).passed
    broken = ref.copy()
    rng = np.random.default_rng(2)
    for r in range(ref.shape[0]):  # one position in ten of every row now predicts another class
        for t in range(0, ref.shape[1], 10):
            broken[r, t, (ref[r, t].argmax() + 1) % ref.shape[2]] += 20.0 + rng.random()
    m = measure("classifier", [ref], [broken])
    assert m["top1_agreement"] == pytest.approx(0.9) and not judge("classifier", m, limits).passed


def test_class_and_embedding_axes_may_sit_elsewhere() -> None:
    ref = sequence_logits()
    moved = np.moveaxis(ref, 2, 1)  # [N, C, T]
    assert measure("classifier", [moved], [moved], axis=1)["top1_agreement"] == 1.0
    assert vectors([moved], axis=1)[0].shape == (8 * 40, 30)
    emb = np.moveaxis(np.stack(REF[1:] * 2, axis=2), 1, 2)  # [8, 2, 16]: the embedding axis is the last
    art = emb.copy()
    art[0, 1] *= -1  # one token's vector flipped
    m = measure("embedding", [emb], [art])
    assert m["cosine_min"] == pytest.approx(-1.0) and m["cosine_mean"] == pytest.approx(1 - 2 / 16)
    with pytest.raises(ValueError, match="batch axis"):
        measure("classifier", [ref], [ref], axis=0)
    with pytest.raises(ValueError, match="does not exist"):
        measure("classifier", [ref], [ref], axis=3)


def test_a_reference_of_one_class_cannot_judge_top1_agreement() -> None:
    ref = np.tile([2.0, 1.0], (12, 1)) + np.random.default_rng(0).normal(scale=0.1, size=(12, 2))
    art = ref + 0.01
    cov = degeneracy([ref], [art], "classifier")
    assert cov.classes == 1 and cov.class_axis_size == 2 and not cov.judgeable
    assert "every one of the 12 reference rows predicts class 0 (of 2)" in cov.reasons[0]
    v = judge("classifier", measure("classifier", [ref], [art]), QualityConfig(top1_agreement=0.98), cov)
    assert v.metrics["top1_agreement"] == 1.0 and not v.passed and v.to_json()["coverage"]["classes_covered"] == 1


def test_a_near_constant_reference_with_an_error_larger_than_its_spread_cannot_judge() -> None:
    """The BERT case: logits move by 0.002-0.003 across inputs, INT8 moved them by 0.006."""
    rng = np.random.default_rng(0)
    ref = np.array([[-1.9, 2.1]]) + rng.uniform(-0.0015, 0.0015, size=(20, 2))
    cov = degeneracy([ref], [ref + 0.006 * rng.choice([-1, 1], size=ref.shape)], "classifier")
    assert not cov.judgeable and "near-constant" in cov.reasons[-1] and cov.error > cov.spread
    assert degeneracy([ref], [ref + 1e-6], "classifier").reasons == cov.reasons[:1]  # small error: only the one class remains
    varied = rng.normal(size=(20, 4))
    assert degeneracy([varied], [varied + 3.0]).judgeable  # a broken artifact on varied rows is a failure, not "cannot judge"
    assert degeneracy([np.ones((5, 3))], [np.ones((5, 3)) + 1e-3]).judgeable  # a constant output is compared as it is
