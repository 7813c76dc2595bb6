"""Issue 28, without a server: the diagnosis names the window that was in play, and the ETA prices the model's latency.

A ResNet-50 made every throughput round INVALID with 500 ms windows (perf_analyzer: "No valid requests recorded
within time interval"); the report blamed machine_drift and pointed at bench.sweep.measurement_interval_ms, which the
default profile never uses. The rounds' points are built here through rounds/pairing.py's own groups (no server).
"""

from __future__ import annotations

import pytest

from pipeline.bench.analysis.diagnose import diagnose
from pipeline.stats.estimate import StopRule
from pipeline.bench.measure.results import Baseline, Point, Sweep, Throughput
from pipeline.stats.ort import Latency, OrtSettings
from pipeline.bench.rounds.pairing import run_rounds, throughput_at
from pipeline.bench.progress import Progress
from pipeline.bench.analysis.ratios import ratios
from pipeline.bench.results import BenchResult, Finding
from pipeline.bench.rounds.results import ThroughputRounds, sweep_from_rounds
from pipeline.bench.rounds.run import RoundsPlan
from pipeline.bench.run import expected_seconds, fit_windows
from pipeline.core.config import BenchConfig, RoundsConfig, SweepConfig
from tests.bench.test_bench_report import _configs, _pt, _res
from tests.bench.test_bench_rounds import c1_rounds

# perf_analyzer 2.51's own words as the sweep records them (PerfRun.reason), from a 100 ms window on a 200 ms model.
TOO_SHORT = (
    "exit 3: WARNING: Pass contained only one request, so sample latency standard deviation will be infinity (UINT64_MAX). | "
    "No valid requests recorded within time interval. Please use a larger time window."
)
UNSTABLE = "exit 2: Failed to obtain stable measurement within 10 measurement windows for concurrency 8. Please try to increase the --measurement-interval."
SETTINGS = BenchConfig(sweep=SweepConfig(measurement_interval_ms=3000), rounds=RoundsConfig(measurement_interval_ms=1441))  # as fitted: the report names these
ROUNDS_KEY, SWEEP_KEY = "bench.rounds.measurement_interval_ms", "bench.sweep.measurement_interval_ms"


def invalid_rounds(c: int, n: int, reason: str = TOO_SHORT) -> ThroughputRounds:
    """``n`` throughput rounds at ``c`` whose every perf_analyzer run was invalid for ``reason``."""
    g = throughput_at(c, lambda v, c, i: Point(c, False, reason), lambda: 300.0, StopRule(n, n, None))
    run_rounds([g], Progress({}))
    return g.record  # type: ignore[return-value]


def default_profile(reason: str = TOO_SHORT) -> BenchResult:
    """Every point from the rounds: c=1 valid, every throughput round at c=8 invalid."""
    res = _res([], [], settings=SETTINGS)
    res.paired_c1 = c1_rounds([(4.7, 4.5), (4.8, 4.6), (4.6, 4.4)], [[(4.6, 4.4)]] * 3, tax=[2.1, 2.0, 2.2])
    res.paired_throughput = {8: invalid_rounds(8, 3, reason)}
    res.variants = sweep_from_rounds(res.paired_c1, res.paired_throughput)
    res.ratios = ratios(res)
    return res


def findings(res: BenchResult) -> dict[tuple[str, str], list[Finding]]:
    out: dict[tuple[str, str], list[Finding]] = {}
    for f in diagnose(res, _configs(), {}, 2, 0.02):
        out.setdefault((f.rule, f.variant), []).append(f)
    return out


def test_rounds_whose_windows_held_no_request_name_the_rounds_window_not_the_sweeps_nor_drift() -> None:
    found = findings(default_profile())
    assert ("machine_drift", "throughput") not in found  # not drift: more rounds cannot give a value
    for v in ("latency", "throughput"):
        (f,) = found[("invalid_measurement", v)]  # said once, on the points the rounds gave
        assert "c8" in f.message and "no request inside a window" in f.message
        assert ROUNDS_KEY in f.fix and "1441 ms" in f.fix and SWEEP_KEY not in f.fix.replace(ROUNDS_KEY, "")


def test_invalid_rounds_beside_a_valid_sweep_are_still_named_with_the_rounds_window() -> None:
    """Full profile: the sweep (3 s windows) measured every point; only the rounds' windows were too short."""
    res = default_profile()
    res.variants = {v: Sweep([_pt(1, 4.4, 200, 0.03, 4.3), _pt(8, 50, 160, 1.0, 6)], "sweep") for v in ("latency", "throughput")}
    res.ratios = ratios(res)
    found = findings(res)
    assert ("machine_drift", "throughput") not in found and ("invalid_measurement", "latency") not in found
    (f,) = found[("invalid_measurement", "throughput")]
    assert "at concurrency 8: no round gave a value" in f.message and "6 of the rounds' 6 perf_analyzer runs" in f.message
    assert ROUNDS_KEY in f.fix and SWEEP_KEY not in f.fix.replace(ROUNDS_KEY, "")


def test_invalid_sweep_points_name_the_sweeps_window() -> None:
    res = _res([_pt(1, 4.4, 200, 0.03, 4.3), Point(8, False, TOO_SHORT)], [_pt(1, 6.5, 140, 2.1, 4.3), Point(8, False, UNSTABLE)], settings=SETTINGS)
    found = findings(res)
    for v in ("latency", "throughput"):
        (f,) = found[("invalid_measurement", v)]
        assert SWEEP_KEY in f.fix and "3000 ms" in f.fix and ROUNDS_KEY not in f.fix and "bench.sweep.stability_percentage" in f.fix
    assert "no request inside a window" in found[("invalid_measurement", "latency")][0].message
    assert "no request inside a window" not in found[("invalid_measurement", "throughput")][0].message  # unstable, not empty


def test_c1_rounds_that_held_no_request_are_not_drift() -> None:
    res = _res([], [], settings=SETTINGS)
    res.paired_c1 = c1_rounds([None, None], [[(4.6, 4.4)]] * 2)
    for r in res.paired_c1.rounds:
        r.latency = Point(1, False, TOO_SHORT)
    res.variants = sweep_from_rounds(res.paired_c1, {})
    res.ratios = ratios(res)
    found = findings(res)
    assert ("machine_drift", "latency") not in found
    assert ROUNDS_KEY in found[("invalid_measurement", "latency")][0].fix


def test_unstable_rounds_without_a_value_may_be_drift_but_the_fix_is_the_rounds_window() -> None:
    """Every window unstable (not empty): the machine may be why, but more rounds cannot help; the window and stability can."""
    res = default_profile(UNSTABLE)
    res.variants = {v: Sweep([_pt(1, 4.4, 200, 0.03, 4.3), _pt(8, 50, 160, 1.0, 6)], "sweep") for v in ("latency", "throughput")}
    res.ratios = ratios(res)
    (f,) = findings(res)[("machine_drift", "throughput")]
    assert "no round gave a value" in f.message
    assert ROUNDS_KEY in f.fix and "bench.rounds.stability_percentage" in f.fix and "more rounds cannot help" in f.fix
    assert "bench.rounds.c1.max" not in f.fix


def test_the_eta_prices_the_fitted_windows_and_the_models_latency() -> None:
    """A model at 200 ms a request: windows of 4 requests at c=16, bursts of 6 requests a side, the rounds' minimum."""
    s = OrtSettings(1, 1, 1)
    b = BenchConfig()
    slow = fit_windows(b, Baseline(Latency(200.0, 210.0, 220.0, 205.0, 200, s), Throughput({1: 5.0, 8: 4.0}, s)), lambda _: None)
    plan = RoundsPlan.of(slow, ["latency", "throughput"])
    guess, priced = expected_seconds(b, plan), expected_seconds(slow, plan, 200.0)
    assert slow.rounds.measurement_interval_ms == 12_800
    run = 3 * 12.8 + 1.0 + 0.4  # three windows, the start, the tail
    per_round = (2 * run + b.rounds.alternations * 2 * 6 * 0.2) + 2 * (2 * run + 12.8 + 0.6)  # c=1 (both variants), c=8 and c=16
    assert priced["rounds"] == pytest.approx(b.rounds.c1.min * per_round + 2 * run)  # the budget waits for 5 rounds; 2 warm-ups
    assert priced["report"] == pytest.approx(8.0 + (b.baseline.warmup_runs + b.baseline.runs) * 0.2)  # the baseline again
    assert priced["rounds"] > 10 * guess["rounds"]
    # A fast model keeps the configured windows and the old guess, give or take its requests' own time.
    fast = Baseline(Latency(10.0, 11.0, 12.0, 10.5, 200, s), Throughput({1: 100.0, 8: 143.0}, s))
    assert fit_windows(b, fast, lambda _: None) == b
    assert expected_seconds(b, plan, 10.0)["rounds"] == pytest.approx(guess["rounds"], rel=0.1)
