"""Ratios, diagnosis rules, paired rounds, tuning and report rendering of the bench, on hand-made typed results.

Assertions read the results as bench.json has them (``to_json()``): the keys other code and releases read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench import baseline, pairing, render, sweep, tune
from pipeline.bench.diagnose import diagnose
from pipeline.bench.measured import Baseline, Candidate, Latency, OrtSettings, Point, Scheduling, Sweep, Throughput, Tuning
from pipeline.bench.ratios import ratios, standin_cost_ms
from pipeline.bench.results import BenchResult, InputsInfo, Machine, MeasuredModel, ServerInfo
from pipeline.core.config import BenchConfig
from tests.tiny_triton import variant_config


def _pt(c: int, p50: float, thr: float, queue: float, compute: float, batch: float = 1.0, valid: bool = True) -> Point:
    if not valid:
        return Point(c, False, "exit 2: Failed to obtain stable measurement")
    server = queue + compute
    return Point(c, True, "", {"p50_ms": p50, "p95_ms": p50 * 1.1, "p99_ms": p50 * 1.2, "throughput_infer_s": thr, "server_queue_ms": queue,
                               "server_compute_input_ms": 0.0, "server_compute_infer_ms": compute, "server_compute_output_ms": 0.0,
                               "server_ms": server, "queue_share": queue / server, "loadavg_1m": 0.5, "avg_ms": p50 + 0.3}, batch)  # fmt: skip


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
    """bench.paired_throughput_concurrency names the compared concurrencies; without paired rounds, bench.concurrency does."""
    lat, thr = [_pt(1, 4.4, 200, 0.03, 4.3), _pt(4, 25, 200, 20, 5)], [_pt(1, 6.5, 140, 2.1, 4.3), _pt(4, 26, 260, 5, 20, 3.7)]
    res = _res(lat, thr, settings=BenchConfig(paired_throughput_concurrency=[1, 4]))
    res.ratios = ratios(res)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    data = res.to_json()
    assert data["ratios"]["throughput_vs_latency_c4"] == pytest.approx(260 / 200)
    assert not [k for k in data["ratios"] if "_c8" in k or "_c16" in k or k.startswith("throughput_vs_latency_c1")]
    assert set(data["summary"]["ratios"]) >= {"throughput_vs_latency_c4", "throughput_vs_ort_best_c4"}
    assert not [k for k in data["summary"]["ratios"] if "_c8" in k or "_c16" in k]
    md = render.markdown(res)
    assert "- throughput / latency variant: c=4 **1.30x** (c=4 unpaired: the sweep's points" in md and "c=8" not in md
    # No paired throughput rounds (paired_throughput_rounds=0, or an external server): the swept concurrencies above 1.
    for off in (BenchConfig(paired_throughput_rounds=0, concurrency=[1, 2, 4]), BenchConfig(server="external", url="h:1", concurrency=[1, 4, 32])):
        res.settings = off
        keys = [k for k in ratios(res).to_json() if k.removeprefix("throughput_vs_latency_c").isdigit()]
        assert keys == [f"throughput_vs_latency_c{c}" for c in off.concurrency if c > 1]
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
    """20 us of queue on a 0.2 ms model is above 2% but below bench.queue_min_ms: no finding."""
    res = _res([_pt(1, 0.3, 3000, 0.02, 0.17)], [_pt(1, 0.9, 1000, 0.6, 0.2)])
    rules = [(d.rule, d.variant) for d in diagnose(res, _configs(), {}, 2, 0.02, min_ms=0.1)]
    assert ("batching_tax", "latency") not in rules and ("batching_tax", "throughput") in rules


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


def _paired(
    ort: list[float], served: list[float | None], max_drift: float = 0.10, want: int = 99,
    compute: list[float] | None = None, inside: str | None = None,
):  # fmt: skip
    """paired_c1 over recorded numbers: ORT p50s are consumed before/after each served run."""
    ort_iter = iter(ort)

    def serve(i: int) -> Point:
        p50 = served[i]
        if p50 is None:
            return Point(1, False, "exit 2: Failed to obtain stable measurement")
        return _pt(1, p50, 200, 0.03, compute[i] if compute else p50 - 0.5)

    return pairing.paired_c1(serve, lambda: next(ort_iter), want, len(served), max_drift, inside)


def test_paired_rounds_count_only_when_the_machine_kept_its_speed() -> None:
    # Round 1's ORT p50 moved 4.3 -> 5.9 ms (37%): it does not count, whatever its ratio (a flattering 0.9x here).
    p = _paired([4.3, 4.3, 4.3, 5.9, 4.4, 4.6, 4.4, 4.4], [5.0, 4.6, 5.2, None]).to_json()
    assert [r["counted"] for r in p["rounds"]] == [True, False, True, False]
    assert p["counted_rounds"] == 2
    assert p["ratio"] == pytest.approx(np.median([5.0 / 4.3, 5.2 / 4.5]))
    assert p["ratio_range"] == [pytest.approx(5.2 / 4.5), pytest.approx(5.0 / 4.3)]
    assert p["rounds"][3]["ratio"] is None and "stable" in p["rounds"][3]["served_reason"]
    # Stopping depends on how many rounds counted, not on their ratios: 2 wanted -> round 3 never runs.
    assert len(_paired([4.3, 4.3, 4.3, 5.9, 4.4, 4.6, 4.4, 4.4], [5.0, 4.6, 5.2, None], want=2).rounds) == 3


def test_headline_prefers_paired_and_has_no_number_when_every_round_drifted() -> None:
    res = _res([_pt(1, 6.4, 150, 0.03, 6.0), _pt(8, 50, 160, 40, 6)], [_pt(8, 28, 280, 10, 16, 4.5)])
    res.paired_c1 = _paired([4.3, 4.4, 4.4, 4.3, 4.3, 4.4], [4.9, 4.95, 5.0])
    res.ratios = ratios(res)
    r = res.ratios.to_json()
    assert r["latency_c1_p50_vs_ort_p50"] == pytest.approx(4.95 / 4.35)
    assert r["latency_c1_p50_vs_ort_p50_unpaired"] == pytest.approx(6.4 / 4.0)  # the sweep point vs a distant baseline
    assert r["latency_c1_paired_rounds_counted"] == 3
    found = _rules(res)
    assert "serving_overhead" not in found  # 1.14x is within the 1.15x limit
    assert "in-process ORT p50 4.35 + 0.10 ms" in found["latency_breakdown"]
    assert "client/HTTP 0.77" in found["latency_breakdown"]
    # The p50s beside the ratio are each a median; the ratio is the median of the rounds' ratios.
    assert "(4.95 ms vs 4.35 ms, each a median over the counted rounds; ratio: median of 3 of 3 paired rounds' ratios" in render.markdown(res)

    res.paired_c1 = _paired([4.3, 5.9, 5.8, 4.4], [4.9, 5.0])
    res.ratios = ratios(res)
    r = res.ratios.to_json()
    assert r["latency_c1_p50_vs_ort_p50"] is None and r["latency_c1_p50_vs_ort_p50_unpaired"] is not None
    found = _rules(res)
    assert "37%" in found["machine_drift"] and "latency_breakdown" not in found


def test_paired_rounds_are_in_the_report(tmp_path: Path) -> None:
    res = _res([_pt(1, 4.4, 200, 0.03, 4.3)], [_pt(1, 6.5, 140, 2.1, 4.3)])
    res.paired_c1 = _paired([4.3, 4.3, 4.3, 5.9], [5.0, 4.6])
    res.ratios = ratios(res)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    md = render.markdown(res)
    assert "median of 1 of 2 paired rounds" in md
    assert "| 1 | 4.30 | 4.60 | n/a | 5.90 | 37% | 0.90x | no |" in md


def test_the_servers_own_ort_time_is_a_gauge_inside_the_run() -> None:
    """A slow phase that begins after one gauge and ends before the next shows in the server's ORT time."""
    ort = [4.3, 4.3, 4.4, 4.3, 4.3, 4.4]
    served, compute = [4.7, 6.1, 4.8], [4.35, 5.9, 4.5]  # round 1: the whole run in a slow phase, gauges fast
    p = _paired(ort, served, compute=compute, inside="server_compute_infer_ms")
    pj = p.to_json()
    assert [r["counted"] for r in pj["rounds"]] == [True, False, True]
    assert pj["rounds"][1]["in_server_gauge"] == 5.9 and pj["rounds"][1]["drift"] == pytest.approx(5.9 / 4.3 - 1)
    assert pj["ratio"] == pytest.approx(np.median([4.7 / 4.3, 4.8 / 4.35]))
    # Without the in-server gauge (external Triton) the same round counts: its gauges agree.
    assert [r["counted"] for r in _paired(ort, served, compute=compute).to_json()["rounds"]] == [True, True, True]
    res = _res([_pt(1, 4.7, 200, 0.03, 4.35)], [_pt(1, 6.5, 140, 2.1, 4.3)])
    res.paired_c1 = p
    res.ratios = ratios(res)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    md = render.markdown(res)
    assert "the server's own time inside ORT during the run (server_compute_infer_ms, mean)" in md
    assert "| 1 | 4.40 | 6.10 | 5.90 | 4.30 | 37% | 1.40x | no |" in md


def test_without_an_in_server_gauge_the_drift_reason_names_none() -> None:
    """External Triton has no in-server ORT time: a drifted pairing must not say it checked one."""
    assert "in-server ORT time" not in (_paired([4.3, 5.9, 5.8, 4.4], [4.9, 5.0]).reason or "x")
    assert "in-server ORT time" in (_paired([4.3, 5.9, 5.8, 4.4], [4.9, 5.0], inside="server_compute_infer_ms").reason or "")


def _paired_tput(ort: list[float], tput: dict[int, list[tuple[float | None, float | None]]], want: int = 99) -> tuple[dict, list]:
    """paired_throughput over recorded (latency, throughput) infer/s per round and in-process best-batch infer/s
    gauges (consumed before/after each round); returns it and the call order."""
    ort_iter, calls = iter(ort), []

    def serve(variant: str, c: int, i: int) -> Point:
        calls.append((c, i, variant))
        x = tput[c][i][0 if variant == "latency" else 1]
        if x is None:
            return Point(c, False, "exit 2: Failed to obtain stable measurement")
        return _pt(c, 1000 * c / x, x, 1.0, 4.0)

    return pairing.paired_throughput(serve, lambda: next(ort_iter), sorted(tput), want, max(map(len, tput.values())), 0.10), calls


def test_paired_throughput_alternates_order_and_counts_only_steady_valid_rounds() -> None:
    # c=8: in round 1 the machine slowed down between the two runs and came back (300 -> 230 -> 300 infer/s in
    # process); before and after agree, the gauge between them does not: not counted, though it flatters (2.0x).
    # c=16: round 2's latency run was invalid: no ratio, not counted.
    p, calls = _paired_tput(
        [300, 300, 295, 300, 230, 300, 290, 290, 290] + [290, 290, 290, 290, 290, 280, 290, 290, 290],
        {8: [(200, 260), (150, 300), (210, 260)], 16: [(200, 280), (190, 290), (None, 300)]},
    )
    assert calls[:6] == [(8, 0, "latency"), (8, 0, "throughput"), (8, 1, "throughput"), (8, 1, "latency"),
                         (8, 2, "latency"), (8, 2, "throughput")]  # fmt: skip
    c8, c16 = p[8].to_json(), p[16].to_json()
    assert [r["counted"] for r in c8["rounds"]] == [True, False, True] and c8["rounds"][1]["order"] == ["throughput", "latency"]
    assert c8["ratio"] == pytest.approx(np.median([260 / 200, 260 / 210]))
    assert (c8["latency_infer_s"], c8["throughput_infer_s"]) == (205, 260)
    # The gauge doubles as the goal's denominator: throughput variant / in-process best batch of the same minute.
    assert c8["rounds"][1]["gauges"] == [300, 230, 300] and c8["rounds"][1]["drift"] == pytest.approx(70 / 230)
    assert c8["rounds"][0]["throughput_vs_ort_best"] == pytest.approx(260 / np.mean([300, 300, 295]))
    assert c8["throughput_vs_ort_best"] == pytest.approx(np.median([260 / np.mean([300, 300, 295]), 260 / 290]))
    assert [r["counted"] for r in c16["rounds"]] == [True, True, False] and c16["rounds"][2]["ratio"] is None
    assert "stable" in c16["rounds"][2]["latency"]["reason"]
    # Two wanted: each concurrency stops after its second counted round.
    p, calls = _paired_tput([300] * 18, {8: [(200, 260)] * 3, 16: [(200, 280)] * 3}, want=2)
    assert [len(p[c].rounds) for c in (8, 16)] == [2, 2] and len(calls) == 8


def test_paired_throughput_outranks_the_sweep_in_ratios_findings_and_report() -> None:
    # The sweep's points (minutes apart, separate servers) say 1.05x at c=16 and 0.95x at c=4; the paired rounds say 1.3x.
    res = _res([_pt(4, 25, 200, 20, 5), _pt(8, 50, 160, 40, 6), _pt(16, 90, 200, 80, 6)],
               [_pt(4, 26, 190, 5, 20, 3.7), _pt(8, 28, 280, 10, 16, 4.5), _pt(16, 60, 210, 30, 20, 8)])  # fmt: skip
    res.paired_throughput, _ = _paired_tput([320] * 18, {1: [(190, 135), (200, 140)], 8: [(200, 250), (210, 260)], 16: [(180, 234), (200, 260)]})
    res.ratios = ratios(res)
    r = res.ratios.to_json()
    assert r["throughput_vs_latency_c16"] == pytest.approx(1.3) and r["throughput_vs_latency_c16_unpaired"] == pytest.approx(1.05)
    assert r["throughput_vs_latency_c8_paired_rounds_counted"] == 2
    assert r["throughput_vs_ort_best_c8"] == pytest.approx(255 / 320) and r["throughput_vs_ort_best_c8_unpaired"] == pytest.approx(280 / 300)
    # The batching tax from the paired c=1 rounds: the throughput variant's p50 above the latency variant's, same minute.
    assert r["batching_tax_c1_ms"] == pytest.approx(np.median([1000 / 135 - 1000 / 190, 1000 / 140 - 1000 / 200]))
    assert r["batching_tax_c1_ms_unpaired"] is None  # no c=1 sweep points in this result
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    # Unpaired c=4 is not judged once pairs exist; paired c=1 (0.7x) is not expected to win.
    assert "throughput_not_better" not in {d.rule for d in res.diagnosis}
    paired, res.paired_throughput = res.paired_throughput, {}
    assert "concurrency 4" in _rules(res)["throughput_not_better"]
    res.paired_throughput = paired
    md = render.markdown(res)
    assert "c=16: median of 2 of 2 paired rounds, range 1.30-1.30x, unpaired sweep ratio 1.05x" in md
    assert "| 8 | 1 | throughput then latency | 320 / 320 / 320 | 210.0 | 260.0 | 0% | 1.24x | 0.81x | 38.10 / 30.77 | yes |" in md
    assert "p50 is 2.14 ms above the latency variant's (paired rounds" in md
    assert "rows taken minutes apart are not comparable" in md
    # Paired rounds that show no gain are a finding even where the sweep looked fine; none counted = machine_drift.
    res.paired_throughput, _ = _paired_tput([300] * 6 + [300, 210, 300] * 2, {8: [(200, 190)] * 2, 16: [(200, 260)] * 2})
    res.ratios = ratios(res)
    r = res.ratios.to_json()
    assert r["throughput_vs_latency_c8"] == pytest.approx(0.95) and r["throughput_vs_latency_c16"] is None
    found = {(d.rule, d.variant): d.message for d in diagnose(res, _configs(), {}, 2, 0.02)}
    assert "median of 2 paired rounds" in found[("throughput_not_better", "throughput")]
    assert "concurrency 16" in found[("machine_drift", "throughput")] and "43%" in found[("machine_drift", "throughput")]
    # c=1 rounds that all drifted: the batching tax says so and gives the sweep's number, never "n/a ms above".
    res.paired_throughput, _ = _paired_tput([300, 210, 300] * 2, {1: [(190, 135)] * 2})
    res.variants["latency"].points.append(_pt(1, 4.4, 200, 0.03, 4.3))
    res.variants["throughput"].points.append(_pt(1, 7.6, 130, 2.1, 5.3))
    res.ratios = ratios(res)
    md = render.markdown(res)
    assert "no paired c=1 round counted, so no same-minute p50 difference (see machine_drift); unpaired sweep: 3.20 ms" in md
    assert "n/a ms above" not in md


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


def _cand(thr: float, gauge: float, steady: bool = True, p99: float = 50.0, budget: float = 100.0, delay: int = 0) -> Candidate:
    return Candidate(Scheduling(delay, [4, 8], 1), True, "", 2.0, 1, [gauge, gauge], 0.0, steady, thr / gauge, p99 <= budget, p99, p99 / 2, thr)


def test_tuning_ranks_against_the_gauge_and_never_picks_a_drifted_candidate() -> None:
    # 0: most infer/s, measured in a fast minute (0.67 of in-process); 1: fewer infer/s in a slow minute, but 0.8 of
    # in-process: the better config. 2: best ratio but its gauges drifted. 3: best ratio but over the p99 budget.
    rows = [_cand(240, 360), _cand(200, 250), _cand(230, 240, steady=False), _cand(250, 260, p99=120)]
    assert tune.choose(rows) == 1
    assert tune.choose([rows[2], rows[3]]) is None


# ---------------------------------------------------------------- typed results <-> bench.json
def _full_result() -> BenchResult:
    """A result with every section: paired c=1 (with an in-server gauge), paired throughput, tuning, ratios, diagnosis."""
    res = _res([_pt(1, 4.7, 200, 0.03, 4.35), _pt(8, 50, 160, 40, 6), _pt(16, 0, 0, 0, 0, valid=False)],
               [_pt(1, 6.5, 140, 2.1, 4.3), _pt(8, 28, 280, 10, 16, 4.5), _pt(16, 60, 210, 30, 20, 8)])  # fmt: skip
    res.server = ServerInfo("embedded", "x", "native", {"latency": ["backend 'onnxruntime' -> 'pipeline_ort'"]}, "2.51.0")
    res.machine.loadavg_end = [1.0, 0.5, 0.2]
    res.baseline.latency_after = Latency(4.2, 4.5, 4.9, 4.3, 200, OrtSettings(2, 1, 1))
    res.paired_c1 = _paired([4.3, 4.3, 4.4, 4.3, 4.3, 4.4], [4.7, 6.1, 4.8], compute=[4.35, 5.9, 4.5], inside="server_compute_infer_ms")
    res.paired_throughput, _ = _paired_tput([300] * 6 + [300, 210, 300] * 2, {8: [(200, 250)] * 2, 16: [(200, 260), (None, 250)]})
    cands = [_cand(240, 360), _cand(200, 250, delay=500), _cand(230, 240, steady=False, delay=2000)]
    res.tuning = Tuning(8, 100.0, 0.1, cands, cands[1].scheduling, "dvc exp run -S ...", 0.2)
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
    assert data["summary"] == res.summary() and set(data["summary"]) == {"server", "ort_p50_ms", "ort_best_infer_s", "ratios", "variants"}
    assert data["summary"]["variants"]["latency"] == {"c1_p50_ms": 4.7, "c1_p99_ms": round(4.7 * 1.2, 4), "peak_infer_s": 200}
    assert data["variants"]["latency"]["points"]["c1"]["p50_ms"] == 4.7 and data["variants"]["latency"]["points"]["c16"]["valid"] is False
    assert data["server"]["mode"] == "embedded" and data["machine"]["loadavg_end"] == [1.0, 0.5, 0.2]
    assert {d["rule"] for d in data["diagnosis"]} >= {"latency_breakdown", "invalid_measurement"}
    assert set(data["diagnosis"][0]) == {"rule", "severity", "variant", "message", "fix"}
    assert data["settings"]["server"] == "embedded" and type(data["settings"]["server"]) is str  # plain JSON, not an Enum
    assert back.settings == res.settings and back.settings.server is res.settings.server  # Enums again when read back
    assert data["tuning"]["chosen"] == {"max_queue_delay_us": 500, "preferred_batch_sizes": [4, 8], "instance_count": 1}
    assert data["paired_throughput"]["c16"]["rounds"][1]["latency"]["valid"] is False


def test_tuning_chooses_with_the_tested_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """tune.tune picks its winner with tune.choose (no copy of the rule), ranked against the gauge, within the p99 budget."""
    import contextlib
    import dataclasses

    class Mode:
        added: dict[str, mc.ModelConfig] = {}

        def embedded_config(self, variant: str) -> mc.ModelConfig:
            return variant_config("m", variant)

        def add_variant(self, name: str, cfg: mc.ModelConfig) -> None:
            self.added[name] = cfg

        @contextlib.contextmanager
        def serve(self, name: str):  # noqa: ANN202
            yield name

    # infer/s and p99 per queue delay: 2000 us gives the most infer/s but misses the 100 ms p99 budget.
    measured = {0: (500.0, 40.0), 500: (700.0, 60.0), 2000: (800.0, 150.0)}

    @dataclasses.dataclass
    class FakeSweeper:
        mode: Mode
        probe_row: object = None

        def run(self, t: str, conc: list[int], tag: str, interval_ms: int | None = None) -> list[Point]:
            thr, p99 = measured[self.mode.added[t].dynamic_batching.max_queue_delay_microseconds]
            return [Point(conc[0], True, "", {"throughput_infer_s": thr, "p99_ms": p99, "p50_ms": p99 / 2}, 4.0)]

    calls = []
    real = tune.choose
    monkeypatch.setattr(tune, "choose", lambda rows: calls.append(len(rows)) or real(rows))
    b = BenchConfig(tune=True, tune_queue_delays_us=[0, 500, 2000], tune_preferred_batch_sizes=[[4, 8]], tune_instance_counts=[1])
    mode = Mode()
    t = tune.tune(mode, FakeSweeper(mode), b, lambda: 1000.0)
    assert calls == [3]
    assert t.chosen == Scheduling(500, [4, 8], 1) and t.lead_over_next == pytest.approx(700 / 500 - 1)
    assert [c.within_budget for c in t.candidates] == [True, True, False] and all(c.steady for c in t.candidates)
    assert "max_queue_delay_us=500" in t.persist
    assert not hasattr(tune, "shipped_form")  # one function writes the shipped form: tune.apply


def test_bench_talks_to_triton_only_through_the_one_client() -> None:
    """No bench module builds Triton REST URLs by hand (servers.py belongs to the serving migration)."""
    bench = Path(tune.__file__).parent
    offenders = [p.name for p in bench.glob("*.py") if p.name != "servers.py" and "urllib" in p.read_text()]
    assert offenders == []
