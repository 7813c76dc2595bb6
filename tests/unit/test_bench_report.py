"""Diagnosis rules, ratios, paired rounds and report rendering of the bench stage, on hand-made results (and the in-process baseline on a tiny model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench import measure, report
from tests.tiny_triton import variant_config


def _pt(c: int, p50: float, thr: float, queue: float, compute: float, batch: float = 1.0, valid: bool = True) -> dict:
    if not valid:
        return {"concurrency": c, "valid": False, "reason": "exit 2: Failed to obtain stable measurement", "avg_batch": None}
    server = queue + compute
    return {"concurrency": c, "valid": True, "reason": "", "p50_ms": p50, "p95_ms": p50 * 1.1, "p99_ms": p50 * 1.2,
            "throughput_infer_s": thr, "server_queue_ms": queue, "server_compute_input_ms": 0.0,
            "server_compute_infer_ms": compute, "server_compute_output_ms": 0.0, "server_ms": server,
            "queue_share": queue / server, "avg_batch": batch, "loadavg_1m": 0.5, "avg_ms": p50 + 0.3}  # fmt: skip


def _res(lat: dict, thr: dict, shapes: int = 1) -> dict:
    return {
        "model": {"name": "m"},
        "server": {"mode": "embedded", "description": "x"},
        "machine": {"cpu_model": "cpu", "cores_available": 2, "cpu_count": 2, "loadavg_start": [0, 0, 0], "versions": {}},
        "inputs": {"requests": 8, "policy": "uniform", "distinct_shapes": shapes},
        "variants": {"latency": {"points": lat}, "throughput": {"points": thr}},
        "baseline": {"latency": {"p50_ms": 4.0}, "throughput": {"best_infer_s": 300.0}},
        "diagnosis": [],
    }


def _configs() -> dict[str, mc.ModelConfig]:
    return {"latency": variant_config("m", "latency", threads=2), "throughput": variant_config("m", "throughput", threads=2)}


def test_ratios_are_the_headline_numbers() -> None:
    res = _res({"c1": _pt(1, 4.4, 200, 0.03, 4.3), "c8": _pt(8, 50, 160, 40, 6)},
               {"c1": _pt(1, 6.5, 140, 2.1, 4.3), "c8": _pt(8, 28, 280, 10, 16, 4.5)})  # fmt: skip
    r = report.ratios(res)
    assert r["latency_c1_p50_vs_ort_p50"] == 4.4 / 4.0
    assert r["throughput_vs_latency_c8"] == 280 / 160
    assert r["throughput_vs_ort_best_c8"] == 280 / 300
    assert r["throughput_vs_latency_c16"] is None  # not measured: no number, not zero
    assert abs(r["batching_tax_c1_ms"] - 2.1) < 1e-9


def test_rules_fire_with_their_evidence() -> None:
    cfgs = _configs()
    cfgs["latency"].dynamic_batching.max_queue_delay_microseconds = 100000  # the 135 ms mistake
    cfgs["throughput"].instance_group[0].count = 2  # 2 x 2 threads on 2 cores
    cfgs["throughput"].optimization.graph.level = 2
    cfgs["latency"].input[0].data_type = mc.TYPE_FP16
    cfgs["throughput"].dynamic_batching.default_queue_policy.max_queue_size = 64
    res = _res({"c1": _pt(1, 104, 9, 100, 4), "c8": _pt(8, 50, 200, 40, 6)},
               {"c1": _pt(1, 0, 0, 0, 0, valid=False), "c8": _pt(8, 40, 190, 30, 8, 1.4)}, shapes=7)  # fmt: skip
    found = {(d["rule"], d["variant"], d["severity"]) for d in report.diagnose(res, cfgs, {"x": "float32"}, 2, 0.02)}
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
    res = _res({"c1": _pt(1, 0.3, 3000, 0.02, 0.17)}, {"c1": _pt(1, 0.9, 1000, 0.6, 0.2)})
    rules = [(d["rule"], d["variant"]) for d in report.diagnose(res, _configs(), {}, 2, 0.02, min_ms=0.1)]
    assert ("batching_tax", "latency") not in rules and ("batching_tax", "throughput") in rules


def test_report_marks_invalid_points_and_names_the_mode(tmp_path: Path) -> None:
    res = _res({"c1": _pt(1, 4.4, 200, 0.03, 4.3)}, {"c1": _pt(1, 0, 0, 0, 0, valid=False)})
    res["ratios"] = report.ratios(res)
    res["diagnosis"] = report.diagnose(res, _configs(), {}, 2, 0.02)
    report.write_outputs(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "**Server mode: embedded.**" in md
    assert "| throughput | 1 | - |" in md and "INVALID" in md
    # perf_analyzer's reason joins its last lines with " | ": escaped, the row keeps the table's 12 columns.
    res["variants"]["throughput"]["points"]["c1"]["reason"] = "exit 2: Please try to increase the --measurement-interval. | Failed to obtain stable measurement."
    report.write_outputs(res, tmp_path)
    row = next(ln for ln in (tmp_path / "report.md").read_text().splitlines() if ln.startswith("| throughput | 1 |"))
    assert row.replace("\\|", "").count("|") == 13 and "interval. \\| Failed" in row
    assert (tmp_path / "bench.png").stat().st_size > 1000
    assert report.curves_csv(res, "throughput").strip() == ",".join(report.CURVE_FIELDS)  # no invalid rows


def _paired(
    ort: list[float], served: list[float | None], max_drift: float = 0.10, want: int = 99,
    compute: list[float] | None = None, inside: str | None = None,
) -> dict:  # fmt: skip
    """paired_c1 over recorded numbers: ORT p50s are consumed before/after each served run."""
    ort_iter = iter(ort)

    def serve(i: int) -> measure.Point:
        p50 = served[i]
        if p50 is None:
            return measure.Point(1, False, "exit 2: Failed to obtain stable measurement")
        return measure.Point(1, True, "", _pt(1, p50, 200, 0.03, compute[i] if compute else p50 - 0.5), 1.0)

    return measure.paired_c1(serve, lambda: next(ort_iter), want, len(served), max_drift, inside)


def test_paired_rounds_count_only_when_the_machine_kept_its_speed() -> None:
    # Round 1's ORT p50 moved 4.3 -> 5.9 ms (37%): it does not count, whatever its ratio (a flattering 0.9x here).
    p = _paired([4.3, 4.3, 4.3, 5.9, 4.4, 4.6, 4.4, 4.4], [5.0, 4.6, 5.2, None])
    assert [r["counted"] for r in p["rounds"]] == [True, False, True, False]
    assert p["counted_rounds"] == 2
    assert p["ratio"] == pytest.approx(np.median([5.0 / 4.3, 5.2 / 4.5]))
    assert p["ratio_range"] == [pytest.approx(5.2 / 4.5), pytest.approx(5.0 / 4.3)]
    assert p["rounds"][3]["ratio"] is None and "stable" in p["rounds"][3]["served_reason"]
    # Stopping depends on how many rounds counted, not on their ratios: 2 wanted -> round 3 never runs.
    assert len(_paired([4.3, 4.3, 4.3, 5.9, 4.4, 4.6, 4.4, 4.4], [5.0, 4.6, 5.2, None], want=2)["rounds"]) == 3


def test_headline_prefers_paired_and_has_no_number_when_every_round_drifted() -> None:
    res = _res({"c1": _pt(1, 6.4, 150, 0.03, 6.0), "c8": _pt(8, 50, 160, 40, 6)}, {"c8": _pt(8, 28, 280, 10, 16, 4.5)})
    res["paired_c1"] = _paired([4.3, 4.4, 4.4, 4.3, 4.3, 4.4], [4.9, 4.95, 5.0])
    res["ratios"] = r = report.ratios(res)
    assert r["latency_c1_p50_vs_ort_p50"] == pytest.approx(4.95 / 4.35)
    assert r["latency_c1_p50_vs_ort_p50_unpaired"] == pytest.approx(6.4 / 4.0)  # the sweep point vs a distant baseline
    assert r["latency_c1_paired_rounds_counted"] == 3
    found = {d["rule"]: d for d in report.diagnose(res, _configs(), {}, 2, 0.02)}
    assert "serving_overhead" not in found  # 1.14x is within the 1.15x limit
    assert "in-process ORT p50 4.35 + 0.10 ms" in found["latency_breakdown"]["message"]
    assert "client/HTTP 0.77" in found["latency_breakdown"]["message"]
    # The p50s beside the ratio are each a median; the ratio is the median of the rounds' ratios.
    assert "(4.95 ms vs 4.35 ms, each a median over the counted rounds; ratio: median of 3 of 3 paired rounds' ratios" in report.markdown(res)

    res["paired_c1"] = _paired([4.3, 5.9, 5.8, 4.4], [4.9, 5.0])
    res["ratios"] = r = report.ratios(res)
    assert r["latency_c1_p50_vs_ort_p50"] is None and r["latency_c1_p50_vs_ort_p50_unpaired"] is not None
    found = {d["rule"]: d for d in report.diagnose(res, _configs(), {}, 2, 0.02)}
    assert "37%" in found["machine_drift"]["message"] and "latency_breakdown" not in found


def test_paired_rounds_are_in_the_report(tmp_path: Path) -> None:
    res = _res({"c1": _pt(1, 4.4, 200, 0.03, 4.3)}, {"c1": _pt(1, 6.5, 140, 2.1, 4.3)})
    res["paired_c1"] = _paired([4.3, 4.3, 4.3, 5.9], [5.0, 4.6])
    res["ratios"] = report.ratios(res)
    res["diagnosis"] = report.diagnose(res, _configs(), {}, 2, 0.02)
    md = report.markdown(res)
    assert "median of 1 of 2 paired rounds" in md
    assert "| 1 | 4.30 | 4.60 | n/a | 5.90 | 37% | 0.90x | no |" in md


def test_the_servers_own_ort_time_is_a_gauge_inside_the_run() -> None:
    """A slow phase that begins after one gauge and ends before the next shows in the server's ORT time."""
    ort = [4.3, 4.3, 4.4, 4.3, 4.3, 4.4]
    served, compute = [4.7, 6.1, 4.8], [4.35, 5.9, 4.5]  # round 1: the whole run in a slow phase, gauges fast
    p = _paired(ort, served, compute=compute, inside="server_compute_infer_ms")
    assert [r["counted"] for r in p["rounds"]] == [True, False, True]
    assert p["rounds"][1]["in_server_gauge"] == 5.9 and p["rounds"][1]["drift"] == pytest.approx(5.9 / 4.3 - 1)
    assert p["ratio"] == pytest.approx(np.median([4.7 / 4.3, 4.8 / 4.35]))
    # Without the in-server gauge (external Triton) the same round counts: its gauges agree.
    assert [r["counted"] for r in _paired(ort, served, compute=compute)["rounds"]] == [True, True, True]
    res = _res({"c1": _pt(1, 4.7, 200, 0.03, 4.35)}, {"c1": _pt(1, 6.5, 140, 2.1, 4.3)})
    res["paired_c1"] = p
    res["ratios"] = report.ratios(res)
    res["diagnosis"] = report.diagnose(res, _configs(), {}, 2, 0.02)
    md = report.markdown(res)
    assert "the server's own time inside ORT during the run (server_compute_infer_ms, mean)" in md
    assert "| 1 | 4.40 | 6.10 | 5.90 | 4.30 | 37% | 1.40x | no |" in md


def _paired_tput(ort: list[float], tput: dict[int, list[tuple[float | None, float | None]]], want: int = 99) -> tuple[dict, list]:
    """paired_throughput over recorded (latency, throughput) infer/s per round and in-process best-batch infer/s
    gauges (consumed before/after each round); returns it and the call order."""
    ort_iter, calls = iter(ort), []

    def serve(variant: str, c: int, i: int) -> measure.Point:
        calls.append((c, i, variant))
        x = tput[c][i][0 if variant == "latency" else 1]
        if x is None:
            return measure.Point(c, False, "exit 2: Failed to obtain stable measurement")
        return measure.Point(c, True, "", _pt(c, 1000 * c / x, x, 1.0, 4.0), 1.0)

    return measure.paired_throughput(serve, lambda: next(ort_iter), sorted(tput), want, max(map(len, tput.values())), 0.10), calls


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
    c8, c16 = p["c8"], p["c16"]
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
    assert [len(p[k]["rounds"]) for k in ("c8", "c16")] == [2, 2] and len(calls) == 8


def test_paired_throughput_outranks_the_sweep_in_ratios_findings_and_report() -> None:
    # The sweep's points (minutes apart, separate servers) say 1.05x at c=16 and 0.95x at c=4; the paired rounds say 1.3x.
    res = _res({"c4": _pt(4, 25, 200, 20, 5), "c8": _pt(8, 50, 160, 40, 6), "c16": _pt(16, 90, 200, 80, 6)},
               {"c4": _pt(4, 26, 190, 5, 20, 3.7), "c8": _pt(8, 28, 280, 10, 16, 4.5), "c16": _pt(16, 60, 210, 30, 20, 8)})  # fmt: skip
    res["paired_throughput"], _ = _paired_tput([320] * 18, {1: [(190, 135), (200, 140)], 8: [(200, 250), (210, 260)], 16: [(180, 234), (200, 260)]})
    res["ratios"] = r = report.ratios(res)
    assert r["throughput_vs_latency_c16"] == pytest.approx(1.3) and r["throughput_vs_latency_c16_unpaired"] == pytest.approx(1.05)
    assert r["throughput_vs_latency_c8_paired_rounds_counted"] == 2
    assert r["throughput_vs_ort_best_c8"] == pytest.approx(255 / 320) and r["throughput_vs_ort_best_c8_unpaired"] == pytest.approx(280 / 300)
    # The batching tax from the paired c=1 rounds: the throughput variant's p50 above the latency variant's, same minute.
    assert r["batching_tax_c1_ms"] == pytest.approx(np.median([1000 / 135 - 1000 / 190, 1000 / 140 - 1000 / 200]))
    assert r["batching_tax_c1_ms_unpaired"] is None  # no c=1 sweep points in this result
    res["diagnosis"] = report.diagnose(res, _configs(), {}, 2, 0.02)
    # Unpaired c=4 is not judged once pairs exist; paired c=1 (0.7x) is not expected to win.
    assert "throughput_not_better" not in {d["rule"] for d in res["diagnosis"]}
    paired = res.pop("paired_throughput")
    assert "concurrency 4" in next(d["message"] for d in report.diagnose(res, _configs(), {}, 2, 0.02) if d["rule"] == "throughput_not_better")
    res["paired_throughput"] = paired
    md = report.markdown(res)
    assert "c=16: median of 2 of 2 paired rounds, range 1.30-1.30x, unpaired sweep ratio 1.05x" in md
    assert "| 8 | 1 | throughput then latency | 320 / 320 / 320 | 210.0 | 260.0 | 0% | 1.24x | 0.81x | 38.10 / 30.77 | yes |" in md
    assert "p50 is 2.14 ms above the latency variant's (paired rounds" in md
    assert "rows taken minutes apart are not comparable" in md
    # Paired rounds that show no gain are a finding even where the sweep looked fine; none counted = machine_drift.
    res["paired_throughput"], _ = _paired_tput([300] * 6 + [300, 210, 300] * 2, {8: [(200, 190)] * 2, 16: [(200, 260)] * 2})
    res["ratios"] = r = report.ratios(res)
    assert r["throughput_vs_latency_c8"] == pytest.approx(0.95) and r["throughput_vs_latency_c16"] is None
    found = {(d["rule"], d["variant"]): d["message"] for d in report.diagnose(res, _configs(), {}, 2, 0.02)}
    assert "median of 2 paired rounds" in found[("throughput_not_better", "throughput")]
    assert "concurrency 16" in found[("machine_drift", "throughput")] and "43%" in found[("machine_drift", "throughput")]
    # c=1 rounds that all drifted: the batching tax says so and gives the sweep's number, never "n/a ms above".
    res["paired_throughput"], _ = _paired_tput([300, 210, 300] * 2, {1: [(190, 135)] * 2})
    res["variants"]["latency"]["points"]["c1"], res["variants"]["throughput"]["points"]["c1"] = _pt(1, 4.4, 200, 0.03, 4.3), _pt(1, 7.6, 130, 2.1, 5.3)
    res["ratios"] = report.ratios(res)
    md = report.markdown(res)
    assert "no paired c=1 round counted, so no same-minute p50 difference (see machine_drift); unpaired sweep: 3.20 ms" in md
    assert "n/a ms above" not in md


def test_standin_split_is_per_execution_and_absent_without_counters() -> None:
    before = {"ort_ns": 1e9, "execute_ns": 1.2e9, "executions": 100.0}
    after = {"ort_ns": 1e9 + 200 * 4.3e6, "execute_ns": 1.2e9 + 200 * 4.45e6, "executions": 300.0}
    split = measure.standin_split(before, after)
    assert split["standin_ort_ms"] == pytest.approx(4.3) and split["standin_execute_ms"] == pytest.approx(4.45)
    assert split["standin_executions"] == 200
    assert measure.standin_split({}, {}) == {}  # external Triton: no stand-in, no split
    assert measure.standin_split(before, before) == {}  # nothing ran
    served = {"server_compute_infer_ms": 4.7, **split}
    assert report.standin_cost_ms(served) == pytest.approx(0.4) and report.standin_cost_ms({"server_compute_infer_ms": 4.7}) is None
    # The breakdown splits that cost: 4.45 - 4.3 ms of our Python in execute, the remaining 0.25 ms IPC to the stub.
    res = _res({"c1": {**_pt(1, 5.6, 180, 0.03, 4.7), **split}}, {})
    msg = next(d["message"] for d in report.diagnose(res, _configs(), {}, 2, 0.02) if d["rule"] == "latency_breakdown")
    assert "python backend 0.40 ms (stand-in Python in execute 0.15 + IPC to the stub 0.25;" in msg


def test_baseline_throughput_interleaves_batch_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real ORT on a tiny model; the slices alternate between batch sizes, so drift cannot crown one of them."""
    from tests.tiny_triton import tiny_onnx

    order: list[int] = []
    real = measure._run_for

    def spy(sess, batches, seconds):  # noqa: ANN001, ANN202
        order.append(next(iter(batches[0].values())).shape[0])
        return real(sess, batches, seconds)

    monkeypatch.setattr(measure, "_run_for", spy)
    rows = [{"x": np.full((1, 16), i, np.float32)} for i in range(3)]
    out = measure.baseline_throughput(tiny_onnx(tmp_path / "m.onnx"), measure.OrtSettings(1, 1, 1), rows, [1, 4], 0.2, slices=3)
    assert order == [1, 4, 1, 4, 1, 4]
    assert set(out["per_batch_infer_s"]) == {"1", "4"} and all(v > 0 for v in out["per_batch_infer_s"].values())
    assert out["best_infer_s"] == max(out["per_batch_infer_s"].values())


def test_tuning_ranks_against_the_gauge_and_never_picks_a_drifted_candidate() -> None:
    from pipeline.bench import tune

    def row(thr: float, gauge: float, steady: bool = True, p99: float = 50.0, budget: float = 100.0) -> dict:
        return {"throughput_infer_s": thr, "vs_ort_best": thr / gauge, "steady": steady, "p99_ms": p99, "within_budget": p99 <= budget}

    # 0: most infer/s, measured in a fast minute (0.67 of in-process); 1: fewer infer/s in a slow minute, but 0.8 of
    # in-process: the better config. 2: best ratio but its gauges drifted. 3: best ratio but over the p99 budget.
    rows = [row(240, 360), row(200, 250), row(230, 240, steady=False), row(250, 260, p99=120)]
    assert tune.choose(rows) == 1
    assert tune.choose([rows[2], rows[3]]) is None
