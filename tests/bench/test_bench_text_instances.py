"""The text model's instance count beside the shipped one: which count is measured, and what the rounds say."""

from __future__ import annotations

import pytest

from pathlib import Path

from pipeline.bench.text_instances import InstanceChoice, measure, other_count
from pipeline.core.config.schema_bench import TextInstancesBenchConfig
from pipeline.serving.perf_analyzer import PerfRun
from pipeline.stats.estimate import estimate


@pytest.mark.parametrize(("shipped", "cores", "other"), [(1, 2, 2), (2, 2, 1), (1, 1, None), (3, 8, 4), (4, 4, 3)])
def test_the_other_count_is_one_more_while_the_cores_allow(shipped: int, cores: int, other: int | None) -> None:
    assert other_count(shipped, cores) == other


def _choice(pairs: list[tuple[float | None, float | None]]) -> InstanceChoice:
    return InstanceChoice(1, 2, 16, pairs, estimate([o / s if s and o else None for s, o in pairs]))


def test_the_verdict_follows_the_interval_and_round_trips() -> None:
    faster = _choice([(100.0, 130.0), (110.0, 140.0), (105.0, 138.0)])
    assert faster.ratio.low is not None and faster.ratio.low > 1
    assert faster.verdict == "2 instances serve more: set variants.throughput.text_instances=2"
    slower = _choice([(100.0, 80.0), (110.0, 85.0), (105.0, 82.0)])
    assert slower.verdict == "kept 1: 2 instances serve less"
    same = _choice([(100.0, 104.0), (110.0, 101.0), (105.0, 99.0)])
    assert same.verdict == "kept 1: the interval cannot tell 2 instances from 1"
    little = _choice([(100.0, 103.0), (110.0, 114.0), (105.0, 108.0)])
    assert little.ratio.low is not None and 1 < little.ratio.low < 1.05
    assert little.verdict == "kept 1: 2 instances serve more, but by less than the 5% a change must gain"
    assert _choice([(None, 100.0), (100.0, None)]).verdict == "kept 1: the comparison gave no number"
    assert InstanceChoice.from_json(faster.to_json()) == faster
    assert faster.summary()["text_instances_other"] == 2 and faster.summary()["text_instances_other_vs_shipped"] == faster.ratio.value


def test_rounds_alternate_and_the_run_before_opens_the_first() -> None:
    """Round 0: the shipped model's throughput point (just measured), then the other; round 1: the other first."""
    calls: list[str] = []
    speed = {"text": 100.0, "twin": 120.0}

    def run(model: str, data: Path, c: int, tag: str) -> PerfRun:
        calls.append(f"{model}@{c}:{tag}")
        return PerfRun(c, [], 0, "", "", {"throughput_infer_s": speed[model] + len(calls)})

    got = measure(run, ("text", "twin"), Path("in.json"), 16, (1, 2), TextInstancesBenchConfig(rounds=3), first=99.0)
    assert calls == [
        "twin@16:text_instances2_round0",
        "twin@16:text_instances2_round1",
        "text@16:text_instances1_round1",
        "text@16:text_instances1_round2",
        "twin@16:text_instances2_round2",
    ]
    assert got.rounds == [(99.0, 121.0), (103.0, 122.0), (104.0, 125.0)] and got.ratio.n == 3
    again = measure(run, ("text", "twin"), Path("in.json"), 16, (1, 2), TextInstancesBenchConfig(rounds=2), first=None)
    assert len(calls) == 5 + 4  # no run before: round 0 measures the shipped model too
    assert again.rounds[0][0] is not None
