"""Diagnosis rules, ratios and report rendering of the bench stage, on hand-made results."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench import report
from tests.tiny_triton import variant_config


def _pt(c: int, p50: float, thr: float, queue: float, compute: float, batch: float = 1.0, valid: bool = True) -> dict:
    if not valid:
        return {"concurrency": c, "valid": False, "reason": "exit 2: Failed to obtain stable measurement", "avg_batch": None}
    server = queue + compute
    return {"concurrency": c, "valid": True, "reason": "", "p50_ms": p50, "p95_ms": p50 * 1.1, "p99_ms": p50 * 1.2,
            "throughput_infer_s": thr, "server_queue_ms": queue, "server_compute_input_ms": 0.0,
            "server_compute_infer_ms": compute, "server_compute_output_ms": 0.0, "server_ms": server,
            "queue_share": queue / server, "avg_batch": batch, "loadavg_1m": 0.5}  # fmt: skip


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
    assert (tmp_path / "bench.png").stat().st_size > 1000
    assert report.curves_csv(res, "throughput").strip() == ",".join(report.CURVE_FIELDS)  # no invalid rows
