"""The one Triton client (pipeline.serving.client) against a real embedded tritonserver, over HTTP and gRPC.

One server (explicit model control, the tiny model on the native stand-in) serves every test in the
module; each test leaves the models it touched loaded as it found them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from google.protobuf import json_format

from pipeline.bench.measure.servers import EmbeddedMode, ExternalMode
from pipeline.core.errors import BenchError, ToolError
from pipeline.serving.client import TritonClient
from pipeline.serving.embedded import build_embedded_repository, read_config
from pipeline.serving.process import EmbeddedServer, free_port
from tests.tiny_triton import FEATURES, shipped_repository
from tests.helpers.markers import starts

PROTOCOLS = ["http", "grpc"]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shipped_repository(tmp_path_factory.mktemp("shipped"), "tiny")


@pytest.fixture(scope="module")
def emb(shipped: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("emb")
    build_embedded_repository(shipped, root)
    return root


@pytest.fixture(scope="module")
@starts("triton")
def srv(emb: Path) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(emb, "tiny", "latency", timeout_s=120, also_load=("tiny__throughput",)) as s:
        yield s


def _infer(srv: EmbeddedServer, model: str, rows: int) -> None:
    x = httpclient.InferInput("x", [rows, FEATURES], "FP32")
    x.set_data_from_numpy(np.zeros((rows, FEATURES), np.float32))
    with srv.client("http") as c:
        c.raw.infer(model, [x])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_health_and_metadata(srv: EmbeddedServer, protocol: str) -> None:
    with srv.client(protocol) as c:
        assert c.url == (srv.grpc_url if protocol == "grpc" else srv.http_url)
        assert c.live() and c.ready()
        assert c.model_ready("tiny") and c.model_ready("tiny", "1") and c.model_ready("tiny__throughput")
        assert not c.model_ready("tiny", "7") and not c.model_ready("no_such_model")
        assert c.server_version() and c.server_version()[0].isdigit()
        cfg = c.model_config("tiny__throughput")
        assert cfg is not None and cfg.backend == "pipeline_ort" and list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
        assert c.model_config("no_such_model") is None


def test_statistics_have_the_rest_shape_over_both_protocols(srv: EmbeddedServer) -> None:
    """gRPC statistics read like REST's: zero counters present, 64-bit counters as numbers."""
    with srv.client("http") as h, srv.client("grpc") as g:
        before = h.model_statistics("tiny")["model_stats"][0]["inference_count"]
        _infer(srv, "tiny", 3)
        # Triton counts a request once it is released, which may be after its response reached us (a busy CI pass
        # once read REST before and gRPC after): compare once the counters hold the three rows.
        deadline = time.monotonic() + 30
        while h.model_statistics("tiny")["model_stats"][0]["inference_count"] < before + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        rest, grpc = h.model_statistics("tiny"), g.model_statistics("tiny")
    assert grpc == rest
    st = rest["model_stats"][0]
    assert st["name"] == "tiny" and st["inference_count"] >= 3 and isinstance(st["inference_count"], int)
    assert st["inference_stats"]["fail"]["count"] == 0 and st["inference_stats"]["success"]["ns"] > 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unload_load_and_override_in_explicit_mode(srv: EmbeddedServer, emb: Path, protocol: str) -> None:
    model = "tiny__throughput"
    with srv.client(protocol) as c:
        c.unload(model)
        assert _eventually(lambda: not c.model_ready(model))
        assert _eventually(c.ready)  # the server is briefly not ready while a model unloads
        c.load(model)
        assert c.wait_ready([model], 60)
        # A JSON config override (repository extension): the server serves it, not config.pbtxt.
        shipped = read_config(emb / model / "config.pbtxt")
        cfg = type(shipped)()
        cfg.CopyFrom(shipped)
        cfg.dynamic_batching.preferred_batch_size[:] = [2, 8]
        c.load(model, json_format.MessageToJson(cfg, preserving_proto_field_name=True))
        assert list(c.model_config(model).dynamic_batching.preferred_batch_size) == [2, 8]  # type: ignore[union-attr]
        # A load without override of an unchanged config.pbtxt keeps what is loaded; override back instead.
        c.load(model, json_format.MessageToJson(shipped, preserving_proto_field_name=True))
        assert list(c.model_config(model).dynamic_batching.preferred_batch_size) == [4, 8]  # type: ignore[union-attr]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_load_carries_tritons_reason(srv: EmbeddedServer, protocol: str) -> None:
    with srv.client(protocol) as c, pytest.raises(ToolError, match="refused to load model 'no_such_model'") as e:
        c.load("no_such_model")
    assert e.value.details["reason"]
    assert srv.proc is not None and srv.proc.poll() is None  # the server keeps serving
    with srv.client(protocol) as c:
        assert c.model_ready("tiny")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unreachable_server_is_quiet_for_health_and_loud_for_control(protocol: str) -> None:
    with TritonClient(f"127.0.0.1:{free_port()}", protocol, timeout_s=2) as c:
        assert not c.live() and not c.ready() and not c.model_ready("tiny")
        assert c.last_error
        assert c.server_version() == "" and c.model_statistics("tiny") == {} and c.model_config("tiny") is None
        assert not c.wait_ready(["tiny"], 0.5)
        with pytest.raises(ToolError, match=f"cannot reach Triton at 127.0.0.1:\\d+ over {protocol}"):
            c.load("tiny")


def test_wait_ready_stops_when_the_process_is_gone(srv: EmbeddedServer) -> None:
    with srv.client() as c:
        assert not c.wait_ready(["tiny"], 60, is_alive=lambda: False)
        assert c.wait_ready(["tiny"], 60, is_alive=lambda: True)


def test_unknown_protocol() -> None:
    with pytest.raises(ToolError, match="unknown Triton protocol 'udp'"):
        TritonClient("127.0.0.1:1", "udp")


# ---------------------------------------------------------------- the bench's server modes over gRPC
def test_external_mode_over_grpc_loads_each_variant(srv: EmbeddedServer, emb: Path) -> None:
    """Given the server's gRPC endpoint, external mode loads, describes and targets it over gRPC only."""
    configs = {v: emb / "tiny" / "configs" / f"{v}.pbtxt" for v in ("latency", "throughput")}
    mode = ExternalMode(f"grpc://{srv.grpc_url}", "tiny", configs, "grpc")
    try:
        with mode.serve("throughput") as t:
            assert (t.perf_url, t.protocol, t.http_url) == (srv.grpc_url, "grpc", "")
            assert t.version and "grpc" in mode.description
            with t.client() as c:
                assert list(c.model_config("tiny").dynamic_batching.preferred_batch_size) == [4, 8]  # type: ignore[union-attr]
        with mode.serve("latency") as t, t.client() as c:
            assert not c.model_config("tiny").HasField("dynamic_batching")  # type: ignore[union-attr]
    finally:
        mode.close()


def test_external_mode_refused_load_is_a_bench_error(srv: EmbeddedServer, emb: Path) -> None:
    configs = {"latency": emb / "tiny" / "configs" / "latency.pbtxt"}
    mode = ExternalMode(srv.grpc_url, "no_such_model", configs, "grpc")
    with pytest.raises(BenchError, match="refused to load model 'no_such_model'") as e, mode.serve("latency"):
        pass
    assert "bench.protocol" in e.value.render() and e.value.details["reason"]


@pytest.mark.triton
def test_embedded_mode_targets_the_grpc_endpoint(shipped: Path, tmp_path: Path) -> None:
    mode = EmbeddedMode(shipped, "grpc", 120, tmp_path / "logs")
    try:
        with mode.serve("latency") as t:
            assert t.protocol == "grpc" and t.perf_url != t.http_url and t.version
            with t.client() as c:
                assert c.model_ready("tiny")
    finally:
        mode.close()


def _eventually(cond, timeout_s: float = 30.0) -> bool:  # noqa: ANN001
    """Whether ``cond()`` holds within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False
