"""The native stand-in backend (native/pipeline_ort) built with g++ and served by the real tritonserver."""

from __future__ import annotations

import hashlib
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pipeline.core.errors import ToolError
from pipeline.serving import native_backend as nb
from pipeline.serving.embedded import build_embedded_repository, read_config, write_config
from pipeline.serving.process import EmbeddedServer
from tests.tiny_triton import FEATURES, shipped_repository


def test_build_is_cached_and_exports_the_backend_api(tmp_path: Path) -> None:
    lib = nb.build(tmp_path)
    assert lib.name == "libtriton_pipeline_ort.so" and lib.parent.parent == tmp_path
    mtime = lib.stat().st_mtime_ns
    assert nb.build(tmp_path) == lib and lib.stat().st_mtime_ns == mtime  # same sources: no recompile
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    for fn in ("TRITONBACKEND_ModelInitialize", "TRITONBACKEND_ModelInstanceInitialize", "TRITONBACKEND_ModelInstanceExecute"):
        assert f" T {fn}\n" in symbols, fn
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "OrtGetApiBase" not in undefined  # ORT is dlopen()ed from the wheel, not linked


def test_build_without_a_compiler_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="no-such-g\\+\\+ not found") as e:
        nb.build(tmp_path, compiler="no-such-g++")
    assert "bench.embedded_backend=python" in str(e.value)
    assert not list(tmp_path.iterdir())


def test_header_download_with_a_wrong_checksum_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "libfake-dev_1.0_amd64.deb"
    fake.write_bytes(b"!<arch>\nnot what was pinned")
    pkg = nb.HeaderPackage(fake.as_uri(), hashlib.sha256(b"something else").hexdigest(), "usr/include")
    monkeypatch.setattr(nb, "HEADER_PACKAGES", (pkg,))
    with pytest.raises(ToolError, match="checksum mismatch"):
        nb.fetch_headers(tmp_path / "headers")
    assert not (tmp_path / "headers").exists() or not list((tmp_path / "headers").iterdir())


def test_a_file_that_is_not_a_deb_is_refused() -> None:
    with pytest.raises(ToolError, match="not a Debian package"):
        nb._deb_data(b"PK\x03\x04 a zip", "x.deb")  # noqa: SLF001 - the parser on its own


def _infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp]).as_numpy("y")


def _stats(srv: EmbeddedServer, model: str) -> dict:
    with srv.client() as client:
        return client.model_statistics(model)["model_stats"][0]


@pytest.mark.triton
def test_batched_requests_get_their_own_rows(tmp_path: Path) -> None:
    """Concurrent requests of 1 and 3 rows, batched by Triton, each get exactly in-process ORT's answer."""
    import onnxruntime as ort

    model_dir = shipped_repository(tmp_path / "shipped")
    shipped, _ = build_embedded_repository(model_dir, tmp_path / "emb")
    cfg = read_config(tmp_path / "emb" / "tiny__throughput" / "config.pbtxt")
    cfg.dynamic_batching.max_queue_delay_microseconds = 50_000  # long enough that concurrent requests meet
    write_config(tmp_path / "emb" / "tiny__throughput" / "config.pbtxt", cfg)
    sess = ort.InferenceSession(str(shipped.onnx), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1 + 2 * (i % 2), FEATURES)).astype(np.float32) for i in range(8)]
    with EmbeddedServer(tmp_path / "emb", "tiny__throughput", timeout_s=60) as srv:
        with ThreadPoolExecutor(len(xs)) as pool:
            got = list(pool.map(lambda x: _infer(srv.http_url, "tiny__throughput", x), xs))
        st = _stats(srv, "tiny__throughput")
    for x, y in zip(xs, got):
        assert y.shape == (len(x), sess.get_outputs()[0].shape[1])
        np.testing.assert_array_equal(y, sess.run(None, {"x": x})[0])
    assert st["inference_count"] == sum(len(x) for x in xs)
    assert st["execution_count"] < len(xs)  # Triton formed batches and the backend split them back
    assert st["inference_stats"]["compute_infer"]["ns"] > 0 and st["inference_stats"]["fail"]["count"] == 0


def _load_error(tmp_path: Path, ort_library: str | None) -> str:
    """The shipped tiny model's latency config with parameter ort_library set to ``ort_library`` (None: removed):
    what the server says when it fails to load it."""
    build_embedded_repository(shipped_repository(tmp_path / "shipped"), tmp_path / "emb")
    path = tmp_path / "emb" / "tiny__latency" / "config.pbtxt"
    cfg = read_config(path)
    if ort_library is None:
        del cfg.parameters["ort_library"]
    else:
        cfg.parameters["ort_library"].string_value = ort_library
    write_config(path, cfg)
    with pytest.raises(ToolError) as e, EmbeddedServer(tmp_path / "emb", "tiny__latency", timeout_s=60):
        pass
    return str(e.value)


@pytest.mark.triton
def test_config_without_the_ort_library_fails_to_load_with_the_reason(tmp_path: Path) -> None:
    error = _load_error(tmp_path, None)
    assert "pipeline_ort: no ONNX Runtime library: set parameter ort_library" in error and "$PIPELINE_ORT_LIBRARY" in error


@pytest.mark.triton
def test_a_library_that_is_not_onnx_runtime_fails_to_load_with_the_reason(tmp_path: Path) -> None:
    error = _load_error(tmp_path, str(tmp_path / "no-such-libonnxruntime.so"))
    assert "cannot load ONNX Runtime from" in error and "no-such-libonnxruntime.so" in error
