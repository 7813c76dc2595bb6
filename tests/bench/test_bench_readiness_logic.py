"""Production-readiness logic without a server: the RSS slope, /metrics deltas and cross-check, records, rules, checks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench.measure import tritonmetrics as tm
from pipeline.bench.analysis.readiness import rejections_not_clean, slow_first_request, unbounded_queue
from pipeline.stats.estimate import Estimate
from pipeline.bench.readiness.overload import burst_intervals
from pipeline.bench.readiness.results import ColdStart, LoadLevel, Overload, Production, Soak, Trace, thin
from pipeline.bench.readiness.soak import rss_slope
from pipeline.core.config import BenchConfig, ConfigProblems
from pipeline.serving.perf_analyzer import parse_passes


def _series(seconds: float, mb_per_h: float, ramp_mb: float = 0.0, noise: float = 0.3, step: float = 0.5) -> list[tuple[float, float]]:
    rng = np.random.default_rng(0)
    t = np.arange(0, seconds, step)
    ramp = ramp_mb * np.minimum(t / 60.0, 1.0)  # the warmup ramp: the first minute
    mb = 500 + ramp + mb_per_h * t / 3600 + rng.normal(0, noise, t.size)
    return list(zip(t + 1000.0, mb))


def test_rss_slope_ignores_the_ramp_and_finds_a_leak() -> None:
    flat = rss_slope(_series(600, 0.0, ramp_mb=80), ramp_s=60)
    assert flat.has_interval and flat.low <= 0 <= flat.high and abs(flat.value) < 5  # 80 MB of ramp, then nothing
    leak = rss_slope(_series(600, 120.0, ramp_mb=80), ramp_s=60)
    assert leak.low > 60 and leak.low <= leak.value <= leak.high and leak.value == pytest.approx(120, rel=0.15)
    assert rss_slope(_series(10, 0.0), ramp_s=60).value is None  # nothing after the ramp


def test_metrics_delta_and_cross_check() -> None:
    before = {"success": 10, "inferences": 10, "executions": 5, "queue_us": 1000, "compute_infer_us": 5000, "failed_rejected": 1, "pending": 3}
    after = {"success": 110, "inferences": 110, "executions": 30, "queue_us": 21000, "compute_infer_us": 105000, "failed_rejected": 4, "failed_other": 0, "pending": 0}
    d = tm.delta(before, after)
    assert d["success"] == 100 and d["queue_ms"] == pytest.approx(0.2) and d["compute_infer_ms"] == pytest.approx(1.0)
    assert d["avg_batch"] == pytest.approx(4.0) and d["failed"] == 3 and d["failed_rejected"] == 3 and d["pending"] == 0
    perf = {"server_queue_ms": 0.25, "server_compute_infer_ms": 1.0, "server_ms": 1.25}
    agree = tm.cross_check(d, perf, 4.0, floor_ms=0.1)
    assert agree["queue_ms"] == pytest.approx(0.2) and agree["compute_infer_ms"] == 0 and agree["avg_batch"] == 0
    # A part of the server time is judged against a tenth of the whole at least: 0.2 vs 0.02 ms of queue in 20 ms is 9%.
    small = tm.cross_check({**d, "queue_ms": 0.202}, {"server_queue_ms": 0.023, "server_ms": 20.0}, None, floor_ms=0.1)
    assert small["queue_ms"] == pytest.approx(0.179 / 2.0)
    assert tm.cross_check(d, perf, 4.0, floor_ms=0.3)["queue_ms"] == 0  # below the floor: noise, not a disagreement
    assert tm.delta(None, after) == {} and tm.cross_check({}, perf, None, 0.1) == {}


def test_parse_passes_reads_every_window() -> None:
    log = (
        "  Pass [1] throughput: 339.44 infer/sec. Avg latency: 44899 usec (std 12229 usec). \n"
        "  Pass [2] throughput: 340.788 infer/sec. Avg latency: 97109 usec (std 11932 usec). \n"
    )
    assert parse_passes(log) == [(339.44, pytest.approx(44.899)), (340.788, pytest.approx(97.109))]


def test_burst_file_is_idle_burst_idle(tmp_path: Path) -> None:
    path, period, rate = burst_intervals(tmp_path / "b.txt", capacity=100.0, factor=4.0, burst_s=2.0)
    gaps = [int(x) for x in path.read_text().split()]
    assert gaps[:2] == [500_000, 500_000] and gaps[-1] == 500_000 and gaps.count(2500) == 800 and period == pytest.approx(3.5) and rate == 400
    assert burst_intervals(tmp_path / "c.txt", capacity=8000.0, factor=4.0, burst_s=0.5)[2] == 5000  # what a client can schedule


def test_records_round_trip() -> None:
    prod = Production(
        [ColdStart("latency", True, 0.5, 1.2, 30.0, 10.0, 30, 300.0, 320.0, 100.0, 20.0, 8.0)],
        Overload(300.0, "rounds", [LoadLevel("150%", 1.5, 450.0, "perf_analyzer", 0, True, passes_ms=[10.0, 30.0])]),
        Soak("throughput", 16, 600.0, 600.0, False, 60.0, Estimate(12.0, 5.0, 20.0, 20), 300.0, 305.0, series=[[0.0, 300.0]]),
        [Trace("latency + throughput", [[0.0, 300.0], [1.0, 301.0]])],
        ["GPU metrics off"],
        ["none"],
    )
    assert Production.from_json(prod.to_json()) == prod
    assert prod.cold_start[0].first_vs_warm == 3.0 and prod.cold_start[0].start_to_ready_s == pytest.approx(1.7)
    assert thin([(float(i), 1.0) for i in range(1000)], 0.0, keep=100)[-1] == [999.0, 1.0]


def _res(**prod: object) -> SimpleNamespace:
    return SimpleNamespace(production=Production(**prod), settings=BenchConfig())


def test_readiness_rules() -> None:
    slow = [ColdStart("latency", False, 0.5, 1.0, 40.0, 10.0, 30), ColdStart("latency", True, 0.5, 1.5, 12.0, 10.0, 30)]
    assert slow_first_request(_res(cold_start=slow)) == []  # the shipped (warmup) one is within 3x; the other only shows what it buys
    [f] = slow_first_request(_res(cold_start=slow[:1]))
    assert f.rule == "slow_first_request" and "4.0x" in f.message and "variants.latency.warmup" in f.fix
    thr = mc.ModelConfig()
    thr.dynamic_batching.max_queue_delay_microseconds = 100
    grew = LoadLevel("150%", 1.5, 450.0, "perf_analyzer", 0, True, passes_ms=[20.0, 60.0, 140.0], rss_start_mb=300, rss_end_mb=340)
    f = unbounded_queue(_res(overload=Overload(300.0, "x", [grew])), {"throughput": thr})
    assert f is not None and "20 -> 60 -> 140" in f.message
    thr.dynamic_batching.default_queue_policy.max_queue_size = 16
    assert unbounded_queue(_res(overload=Overload(300.0, "x", [grew])), {"throughput": thr}) is None
    bounded = LoadLevel("150% bounded", 1.5, 450.0, "open-loop client (gRPC)", 16, True, success=300, rejected=150)
    assert rejections_not_clean(_res(overload=Overload(300.0, "x", [bounded]))) is None
    bounded.achieved_rate = 60.0  # rejecting while serving a fifth of the capacity: the queue starves the model
    f = rejections_not_clean(_res(overload=Overload(300.0, "x", [bounded])))
    assert f is not None and f.severity == "warning" and "starved" in f.message
    bounded.timeouts, bounded.achieved_rate = 3, 290.0
    assert "timed out" in rejections_not_clean(_res(overload=Overload(300.0, "x", [bounded]))).message


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("bench.soak.duration_s=100", "bench.soak.ramp_s"),  # 60 s of ramp leaves too little of 100 s
        ("bench.overload.levels=[0.5,0]", "bench.overload.levels"),
        ("bench.readiness.first_request_max_ratio=0.5", "bench.readiness.first_request_max_ratio"),
        ("bench.metrics_url=nohost", "bench.metrics_url"),
        ("bench.soak.memory_growth_mb_per_h=0", "bench.soak.memory_growth_mb_per_h"),
    ],
)
def test_readiness_keys_are_checked_at_composition(make_params, override: str, key: str) -> None:
    from pipeline.core.config import load_config

    with pytest.raises(ConfigProblems) as e:
        load_config(make_params(override))
    assert [p.key for p in e.value.problems] == [key]
