"""The INT8 fallback's stop rule and bisection (pipeline/convert/int8_search.py), on quality verdicts made by the gate's
own judge: the rule passes only what the validation rows confirm, the bisection finds the boundary in log2(n) tries."""

from __future__ import annotations

import math

import pytest

from pipeline.convert.int8_search import Judged, bisect, checks, credited, margin, passes
from pipeline.core import quality
from pipeline.core.config import QualityConfig

LIMITS = QualityConfig(cosine_min=0.98)


def judged(search: float | None, validation: float | None) -> Judged:
    """An embedding output judged on both parts, with only cosine_min set (the others as if perfect)."""

    def one(v: float | None) -> quality.QualityVerdict:
        return quality.judge("embedding", {"cosine_min": v, "cosine_mean": 1.0, "rank_agreement": 1.0}, LIMITS)

    return Judged({"embedding": one(search)}, {"embedding": one(validation)})


def test_the_first_quantization_passes_only_when_both_parts_pass() -> None:
    assert passes(judged(0.99, 0.985), judged(0.99, 0.985))
    assert not passes(judged(0.99, 0.97), judged(0.99, 0.97))  # the search rows alone would stop here
    assert not passes(judged(0.97, 0.99), judged(0.97, 0.99))  # the hard rows may be among the search rows


def test_search_rows_are_credited_only_with_the_gain_the_validation_rows_confirm() -> None:
    first = judged(0.96, 0.98)  # errors 0.04 and 0.02
    # Both parts now pass 0.98, but the validation rows' error shrank by a quarter only (0.02 -> 0.015): the search
    # rows' error is credited as 0.04 * 0.75 = 0.03, so they stand at 0.97 and the candidate fails.
    now = judged(0.985, 0.985)
    c = checks(first, now)["embedding.cosine_min"]
    assert (c["search"], c["validation"], c["threshold"]) == (0.985, 0.985, 0.98) and c["credited"] == pytest.approx(0.97)
    assert not passes(first, now) and margin(first, now) == pytest.approx(-0.5)  # 0.03 of a 0.02 error budget
    # When the validation rows' error shrinks to a quarter (0.02 -> 0.005), the search rows' may too (0.04 -> 0.01): their
    # own 0.985 counts in full.
    assert passes(first, judged(0.985, 0.995)) and checks(first, judged(0.985, 0.995))["embedding.cosine_min"]["credited"] == 0.985


def test_credit_never_exceeds_the_search_rows_own_value_and_a_perfect_start_confirms_nothing() -> None:
    assert credited(0.97, 0.999, 0.96, 0.98) == 0.97  # the validation rows improved more: the search rows' own value binds
    assert credited(0.99, 1.0, 0.95, 1.0) == 0.99  # validation error 0 at the start: no factor to measure, full credit
    assert credited(0.99, 0.97, 0.96, 0.98) == pytest.approx(1 - 0.04 * 1.5)  # validation got worse: less than the start


def test_a_metric_that_cannot_be_computed_fails_the_rule() -> None:
    assert not passes(judged(0.99, 0.99), judged(0.99, None))
    assert not passes(judged(0.99, 0.99), judged(math.nan, 0.99))


def test_no_threshold_set_passes() -> None:
    free = quality.judge("embedding", {"cosine_min": 0.1, "cosine_mean": 0.1, "rank_agreement": 0.1}, QualityConfig())
    j = Judged({"e": free}, {"e": free})
    assert passes(j, j) and checks(j, j) == {}


@pytest.mark.parametrize("boundary", [1, 5, 23, 47])
def test_bisection_finds_the_smallest_passing_k_in_log2_n_evaluations(boundary: int) -> None:
    seen: list[int] = []
    best, tried = bisect(48, lambda k: seen.append(k) or k >= boundary, budget=10)
    assert best == boundary and tried == seen and len(tried) <= math.ceil(math.log2(48)) and 48 not in tried


def test_bisection_never_evaluates_every_node_fp32_and_stops_at_its_budget() -> None:
    best, tried = bisect(48, lambda k: False, budget=10)
    assert best is None and max(tried) == 47  # k = n would be an FP32 model under an INT8 name
    best, tried = bisect(48, lambda k: k >= 5, budget=2)
    assert tried == [24, 12] and best == 12  # a pass, not the smallest: the budget ran out
    assert bisect(1, lambda k: True, budget=5) == (None, [])  # one node: nothing to keep FP32 but all of it
