"""Ratios, diagnosis rules, tuning and report rendering of the bench, on hand-made typed results (rounds: test_bench_rounds.py).

Assertions read the results as bench.json has them (``to_json()``): the keys other code and releases read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench.measure import baseline, sweep
from pipeline.bench.report import render
from pipeline.bench.analysis.diagnose import diagnose
from pipeline.bench.measure.results import Baseline, Point, Sweep, Throughput
from pipeline.records.tune import Comparison, Interval, Trial, TuneKnobs, TuneRecord
from pipeline.stats.ort import Latency, OrtSettings
from pipeline.bench.analysis.ratios import ratios, standin_cost_ms
from pipeline.bench.measure.inputs import InputsInfo
from pipeline.bench.measure.machine import Machine
from pipeline.bench.results import BenchResult, ServerInfo
from pipeline.records.bench import MeasuredModel
from pipeline.core.config import BenchConfig, RoundsConfig, SweepConfig, ThroughputRoundsConfig
from tests.tiny_triton import variant_config


def _pt(c: int, p50: float, thr: float, queue: float, compute: float, batch: float = 1.0, valid: bool = True) -> Point:
    if not valid:
        return Point(c, False, "exit 2: Failed to obtain stable measurement")
    server = queue + compute
    return Point(
        c,
        True,
        "",
        {
            "p50_ms": p50,
            "p95_ms": p50 * 1.1,
            "p99_ms": p50 * 1.2,
            "throughput_infer_s": thr,
            "server_queue_ms": queue,
            "server_compute_input_ms": 0.0,
            "server_compute_infer_ms": compute,
            "server_compute_output_ms": 0.0,
            "server_ms": server,
            "queue_share": queue / server,
            "loadavg_1m": 0.5,
            "avg_ms": p50 + 0.3,
        },
        batch,
    )


def _res(lat: list[Point], thr: list[Point], shapes: int = 1, settings: BenchConfig | None = None) -> BenchResult:
    s = OrtSettings(2, 1, 1)
    return BenchResult(
        machine=Machine("cpu", 2, 2, "linux", [0, 0, 0], {}),
        model=MeasuredModel("m", "m/1/model.onnx", "1", {"latency": "m/configs/latency.pbtxt"}, "ab" * 32, {"latency": "cd" * 32}),
        inputs=InputsInfo(8, "uniform", shapes),
        settings=settings or BenchConfig(),
        baseline=Baseline(Latency(4.0, 4.4, 4.8, 4.1, 200, s), Throughput({1: 150.0, 8: 300.0}, s)),
        server=ServerInfo("embedded", "x"),
        variants={"latency": Sweep(lat), "throughput": Sweep(thr)},
    )


def _configs() -> dict[str, mc.ModelConfig]:
    return {"latency": variant_config("m", "latency", threads=2), "throughput": variant_config("m", "throughput", threads=2)}


def _rules(res: BenchResult, **kw: float) -> dict[str, str]:
    return {d.rule: d.message for d in diagnose(res, _configs(), {}, 2, 0.02, **kw)}


def test_ratios_are_the_headline_numbers() -> None:
    res = _res([_pt(1, 4.4, 200, 0.03, 4.3), _pt(8, 50, 160, 40, 6)], [_pt(1, 6.5, 140, 2.1, 4.3), _pt(8, 28, 280, 10, 16, 4.5)])
    r = ratios(res).to_json()
    assert r["latency_c1_p50_vs_ort_p50"] == 4.4 / 4.0
    assert r["throughput_vs_latency_c8"] == 280 / 160
    assert r["throughput_vs_ort_best_c8"] == 280 / 300
    assert r["throughput_vs_latency_c16"] is None  # not measured: no number, not zero
    assert abs(r["batching_tax_c1_ms"] - 2.1) < 1e-9


def test_compared_concurrencies_come_from_the_config(tmp_path: Path) -> None:
    """bench.rounds.throughput.concurrency names the compared concurrencies; without paired rounds, bench.sweep.concurrency does."""
    lat, thr = [_pt(1, 4.4, 200, 0.03, 4.3), _pt(4, 25, 200, 20, 5)], [_pt(1, 6.5, 140, 2.1, 4.3), _pt(4, 26, 260, 5, 20, 3.7)]
    res = _res(lat, thr, settings=BenchConfig(rounds=RoundsConfig(throughput=ThroughputRoundsConfig(concurrency=[1, 4]))))
    res.ratios = ratios(res)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    data = res.to_json()
    assert data["ratios"]["throughput_vs_latency_c4"] == pytest.approx(260 / 200)
    assert not [k for k in data["ratios"] if "_c8" in k or "_c16" in k or k.startswith("throughput_vs_latency_c1")]
    assert set(data["summary"]["ratios"]) >= {"throughput_vs_latency_c4", "throughput_vs_ort_best_c4"}
    assert not [k for k in data["summary"]["ratios"] if "_c8" in k or "_c16" in k]
    md = render.markdown(res)
    assert "- throughput / latency variant: c=4 **1.30x** (unpaired: c=4 1.30x)" in md and "c=8" not in md
    # No paired throughput rounds (bench.rounds.throughput.min=0, or an external server): the swept concurrencies above 1.
    for off in (
        BenchConfig(profile="full", rounds=RoundsConfig(throughput=ThroughputRoundsConfig(min=0)), sweep=SweepConfig(concurrency=[1, 2, 4])),
        BenchConfig(server="external", url="h:1", sweep=SweepConfig(concurrency=[1, 4, 32])),
    ):
        res.settings = off
        keys = [k for k in ratios(res).to_json() if k.removeprefix("throughput_vs_latency_c").isdigit()]
        assert keys == [f"throughput_vs_latency_c{c}" for c in off.sweep.concurrency if c > 1]
    # The default profile measures the variants only in rounds: without throughput rounds nothing is compared.
    res.settings = BenchConfig(rounds=RoundsConfig(throughput=ThroughputRoundsConfig(min=0)))
    assert ratios(res).compared == []
    # The default config still compares at c=8 and c=16.
    res.settings = BenchConfig()
    assert [x.concurrency for x in ratios(res).compared] == [8, 16]


def test_rules_fire_with_their_evidence() -> None:
    cfgs = _configs()
    cfgs["latency"].dynamic_batching.max_queue_delay_microseconds = 100000  # the 135 ms mistake
    cfgs["throughput"].instance_group[0].count = 2  # 2 x 2 threads on 2 cores
    cfgs["throughput"].optimization.graph.level = 2
    cfgs["latency"].input[0].data_type = mc.TYPE_FP16
    cfgs["throughput"].dynamic_batching.default_queue_policy.max_queue_size = 64
    res = _res([_pt(1, 104, 9, 100, 4), _pt(8, 50, 200, 40, 6)], [_pt(1, 0, 0, 0, 0, valid=False), _pt(8, 40, 190, 30, 8, 1.4)], shapes=7)
    found = {(d.rule, d.variant, d.severity) for d in diagnose(res, cfgs, {"x": "float32"}, 2, 0.02)}
    assert ("batching_tax", "latency", "error") in found
    assert ("oversubscription", "throughput", "warning") in found
    assert ("graph_level_off", "throughput", "warning") in found
    assert ("input_dtype", "latency", "error") in found
    assert ("throughput_not_better", "throughput", "warning") in found
    assert ("small_batches", "throughput", "warning") in found
    assert ("unstable_variant", "throughput", "warning") in found
    assert ("serving_overhead", "latency", "warning") in found
    assert ("invalid_measurement", "throughput", "warning") in found


def test_tiny_queue_is_not_a_tax() -> None:
    """20 us of queue on a 0.2 ms model is above 2% but below bench.queue.min_ms: no finding."""
    res = _res([_pt(1, 0.3, 3000, 0.02, 0.17)], [_pt(1, 0.9, 1000, 0.6, 0.2)])
    rules = [(d.rule, d.variant) for d in diagnose(res, _configs(), {}, 2, 0.02, min_ms=0.1)]
    assert ("batching_tax", "latency") not in rules and ("batching_tax", "throughput") in rules


def test_queue_without_a_batcher_is_the_machine_not_the_config() -> None:
    """Queue wait at c=1 on a variant with no dynamic batching is a busy CPU: a warning, never the config error."""
    res = _res([_pt(1, 9.5, 100, 0.7, 8.8)], [_pt(1, 11.5, 80, 2.3, 10.7)])
    found = {(d.rule, d.variant): d for d in diagnose(res, _configs(), {}, 2, 0.02)}
    assert found[("batching_tax", "latency")].severity == "warning" and "no dynamic batching" in found[("batching_tax", "latency")].message
    assert found[("batching_tax", "throughput")].severity == "info"
    cfgs = _configs()
    cfgs["latency"].dynamic_batching.max_queue_delay_microseconds = 0  # a batcher, even without delay, is config
    assert ("batching_tax", "latency", "error") in {(d.rule, d.variant, d.severity) for d in diagnose(res, cfgs, {}, 2, 0.02)}


def test_report_marks_invalid_points_and_names_the_mode(tmp_path: Path) -> None:
    res = _res([_pt(1, 4.4, 200, 0.03, 4.3)], [_pt(1, 0, 0, 0, 0, valid=False)])
    res.ratios = ratios(res)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    render.write_outputs(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "**Server mode: embedded.**" in md
    assert "| throughput | 1 | - |" in md and "INVALID" in md
    # perf_analyzer's reason joins its last lines with " | ": escaped, the row keeps the table's 12 columns.
    res.variants["throughput"].points[0].reason = "exit 2: Please try to increase the --measurement-interval. | Failed to obtain stable measurement."
    render.write_outputs(res, tmp_path)
    row = next(ln for ln in (tmp_path / "report.md").read_text().splitlines() if ln.startswith("| throughput | 1 |"))
    assert row.replace("\\|", "").count("|") == 13 and "interval. \\| Failed" in row
    assert (tmp_path / "bench.png").stat().st_size > 1000
    assert render.curves_csv(res, "throughput").strip() == ",".join(render.CURVE_FIELDS)  # no invalid rows


def test_standin_split_is_per_execution_and_absent_without_counters() -> None:
    before = {"ort_ns": 1e9, "execute_ns": 1.2e9, "executions": 100.0}
    after = {"ort_ns": 1e9 + 200 * 4.3e6, "execute_ns": 1.2e9 + 200 * 4.45e6, "executions": 300.0}
    split = sweep.standin_split(before, after)
    assert split["standin_ort_ms"] == pytest.approx(4.3) and split["standin_execute_ms"] == pytest.approx(4.45)
    assert split["standin_executions"] == 200
    assert sweep.standin_split({}, {}) == {}  # external Triton: no stand-in, no split
    assert sweep.standin_split(before, before) == {}  # nothing ran
    served = Point(1, True, "", {"server_compute_infer_ms": 4.7, **split})
    assert standin_cost_ms(served) == pytest.approx(0.4) and standin_cost_ms(Point(1, True, "", {"server_compute_infer_ms": 4.7})) is None
    # The breakdown splits that cost: 4.45 - 4.3 ms of our Python in execute, the remaining 0.25 ms IPC to the stub.
    c1 = _pt(1, 5.6, 180, 0.03, 4.7)
    c1.metrics.update(split)
    msg = _rules(_res([c1], []))["latency_breakdown"]
    assert "python backend 0.40 ms (stand-in Python in execute 0.15 + IPC to the stub 0.25;" in msg


def test_a_standin_cost_not_below_the_served_p50_is_not_taken_off(tmp_path: Path) -> None:
    """The cost is a mean, the p50 a median: when stalls lift the mean past the median the ratio is left out, not negative."""
    split = {"standin_ort_ms": 0.5, "standin_execute_ms": 0.6, "standin_executions": 200.0}
    quiet, stalled = _pt(1, 4.4, 200, 0.03, 4.3), _pt(1, 1.0, 200, 0.03, 9.5)
    quiet.metrics.update({**split, "standin_ort_ms": 4.0})  # 0.3 ms of python backend under a 4.4 ms p50
    stalled.metrics.update(split)  # 9.0 ms of mean cost under a 1.0 ms p50
    assert ratios(_res([quiet], [])).latency_c1_p50_vs_ort_p50_standin_removed == pytest.approx(4.4 / 4.0 * (4.4 - 0.3) / 4.4)
    res = _res([stalled], [])
    res.ratios = ratios(res)
    assert res.ratios.latency_c1_p50_vs_ort_p50_standin_removed is None and res.ratios.latency_c1.value == pytest.approx(1.0 / 4.0)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    md = render.markdown(res)
    assert "the python backend's mean cost (9.00 ms) is not below the served p50 (1.00 ms)" in md and "without the python backend's measured cost" not in md


def test_baseline_throughput_interleaves_batch_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real ORT on a tiny model; the slices alternate between batch sizes, so drift cannot crown one of them."""
    from tests.tiny_triton import tiny_onnx

    order: list[int] = []
    real = baseline._run_for

    def spy(sess, batches, seconds):  # noqa: ANN001, ANN202
        order.append(next(iter(batches[0].values())).shape[0])
        return real(sess, batches, seconds)

    monkeypatch.setattr(baseline, "_run_for", spy)
    rows = [{"x": np.full((1, 16), i, np.float32)} for i in range(3)]
    out = baseline.baseline_throughput(tiny_onnx(tmp_path / "m.onnx"), OrtSettings(1, 1, 1), rows, [1, 4], 0.2, slices=3).to_json()
    assert order == [1, 4, 1, 4, 1, 4]
    assert set(out["per_batch_infer_s"]) == {"1", "4"} and all(v > 0 for v in out["per_batch_infer_s"].values())
    assert out["best_infer_s"] == max(out["per_batch_infer_s"].values())


# ---------------------------------------------------------------- typed results <-> bench.json
def _tune_record() -> TuneRecord:
    """The tune stage's record of a search that moved the queue delay from 0 to 500 us."""
    start = TuneKnobs(1, 8, (4, 8), 0, 2, 1, 1)
    won = dataclasses.replace(start, max_queue_delay_us=500)
    ratio = Interval(1.2, 1.1, 1.3, 6)
    vs = Comparison("winner", "start", won, start, ratio, 240.0, 200.0, 40.0, 35.0)
    trials = [
        Trial(0, "max_queue_delay_us", start, Interval(1.0, 1.0, 1.0, 3), 200.0, 35.0, 3, True, "incumbent"),
        Trial(0, "max_queue_delay_us", won, ratio, 240.0, 40.0, 3, True, "moved the search: confirmed in fresh rounds", ratio),
    ]
    return TuneRecord(True, "search", "perf_throughput", 100.0, [16], start, won, "moved max_queue_delay_us: 0 -> 500", trials=trials, vs_start=vs)


def _full_result() -> BenchResult:
    """A result with every section: c=1 rounds (embedded), throughput rounds, tuning, ratios, diagnosis."""
    res = _res(
        [_pt(1, 4.7, 200, 0.03, 4.35), _pt(8, 50, 160, 40, 6), _pt(16, 0, 0, 0, 0, valid=False)],
        [_pt(1, 6.5, 140, 2.1, 4.3), _pt(8, 28, 280, 10, 16, 4.5), _pt(16, 60, 210, 30, 20, 8)],
    )
    res.server = ServerInfo("embedded", "x", "native", {"latency": ["backend 'onnxruntime' -> 'pipeline_ort'"]}, "2.51.0")
    res.machine.loadavg_end = [1.0, 0.5, 0.2]
    res.baseline.latency_after = Latency(4.2, 4.5, 4.9, 4.3, 200, OrtSettings(2, 1, 1))
    from tests.bench.test_bench_rounds import c1_rounds, throughput_rounds

    res.paired_c1 = c1_rounds([(4.7, 4.35), (6.1, 5.9), (4.8, 4.5)], [[(4.4, 4.3), (4.5, 4.3)]] * 3, tax=[1.8, 1.9, 2.0])
    res.paired_throughput = {8: throughput_rounds(8, [(200, 250)] * 2, [300, 300]), 16: throughput_rounds(16, [(200, 260), (None, 250)], [300, 210])}
    res.tune = _tune_record()
    res.ratios = ratios(res)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    return res


def test_bench_json_round_trips_through_the_typed_result() -> None:
    import json

    res = _full_result()
    data = res.to_json()
    back = BenchResult.from_json(json.loads(json.dumps(data)))
    assert back.to_json() == data and json.dumps(back.to_json()) == json.dumps(data)  # same keys, values and order
    assert render.markdown(back) == render.markdown(res)  # a report rendered again from bench.json has the same text
    # What other code reads (releases, dvc metrics, the stage's console line).
    assert data["model"]["name"] == "m" and data["model"]["sha256"] == "ab" * 32 and data["model"]["configs_sha256"] == {"latency": "cd" * 32}
    assert data["summary"] == res.summary() and set(data["summary"]) == {"server", "ort_p50_ms", "ort_best_infer_s", "ratios", "variants", "tune"}
    assert data["summary"]["variants"]["latency"] == {"c1_p50_ms": 4.7, "c1_p99_ms": round(4.7 * 1.2, 4), "peak_infer_s": 200}
    assert data["variants"]["latency"]["points"]["c1"]["p50_ms"] == 4.7 and data["variants"]["latency"]["points"]["c16"]["valid"] is False
    assert data["server"]["mode"] == "embedded" and data["machine"]["loadavg_end"] == [1.0, 0.5, 0.2]
    assert {d["rule"] for d in data["diagnosis"]} >= {"latency_breakdown", "invalid_measurement"}
    assert set(data["diagnosis"][0]) == {"rule", "severity", "variant", "message", "fix"}
    assert data["settings"]["server"] == "embedded" and type(data["settings"]["server"]) is str  # plain JSON, not an Enum
    assert back.settings == res.settings and back.settings.server is res.settings.server  # Enums again when read back
    assert data["tune"]["winner"]["max_queue_delay_us"] == 500 and data["tune"]["winner"]["preferred_batch_sizes"] == [4, 8]
    assert data["summary"]["tune"] == {"source": "search", "partial": False, "vs_start": 1.2, "vs_start_ci90_low": 1.1, "vs_start_ci90_high": 1.3}
    assert "Tuning of the throughput variant (the tune stage)" in render.markdown(res)
    assert data["paired_throughput"]["c16"]["rounds"][1]["latency"]["valid"] is False


def test_bench_talks_to_triton_only_through_the_one_client() -> None:
    """No bench module builds Triton REST URLs by hand (servers.py belongs to the serving migration)."""
    bench = Path(render.__file__).parent.parent
    offenders = [p.relative_to(bench).as_posix() for p in bench.rglob("*.py") if p.name != "servers.py" and "urllib" in p.read_text()]
    assert offenders == []


def test_the_measurement_window_fits_a_slow_model_and_leaves_a_fast_one_alone() -> None:
    """Issue 28, finding 7: at ~44 infer/s every 500 ms window was INVALID; the window now spans 4 request latencies."""
    from pipeline.bench.measure.results import WINDOW_CAP_MS, fitted_window_ms
    from pipeline.bench.run import fit_windows

    s = OrtSettings(1, 1, 1)
    minilm = Baseline(Latency(9.6, 10.0, 12.0, 9.8, 200, s), Throughput({1: 110.9, 8: 143.6, 16: 131.6}, s))  # the journey's numbers
    assert fitted_window_ms(minilm, 500, 16) == 500 and fitted_window_ms(minilm, 3000, 16) == 3000
    resnet = Baseline(Latency(60.0, 62.0, 70.0, 61.0, 50, s), Throughput({1: 16.0, 8: 44.4}, s))  # c=16: 360 ms a request
    assert fitted_window_ms(resnet, 500, 16) == 1441 and fitted_window_ms(resnet, 500, 1) == 500
    glacial = Baseline(Latency(5000.0, 5100.0, 5200.0, 5050.0, 5, s), Throughput({1: 0.2}, s))
    assert fitted_window_ms(glacial, 500, 16) == WINDOW_CAP_MS
    logged: list[str] = []
    b = fit_windows(BenchConfig(sweep=SweepConfig(measurement_interval_ms=1000), rounds=RoundsConfig(measurement_interval_ms=500)), resnet, logged.append)
    assert (b.sweep.measurement_interval_ms, b.rounds.measurement_interval_ms) == (1441, 1441)
    assert "bench.rounds.measurement_interval_ms 500 -> 1441 ms" in logged[0]
    assert fit_windows(BenchConfig(), minilm, logged.append) == BenchConfig() and len(logged) == 1
