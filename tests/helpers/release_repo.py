"""A tiny shipped-style repository and the reports a release checks, for the release tests.

The model is a python-backend model (the pytriton tritonserver has no onnxruntime
backend), so the same repository can be released, promoted and served live. It
answers ``y = x + version`` so a test can tell which version served a request.
Beside model.py its version directory holds ``model.onnx``: the bytes the parity report
vouches for by sha256, as the repository stage ships them (the python backend ignores it).
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.records.bench import BenchRecord, MeasuredModel
from pipeline.records.canary import CanaryRecord
from pipeline.release.build import BuildInputs, BuildResult, build_release
from pipeline.release.promote import promote, rollback
from pipeline.release.store import pointer
from pipeline.release.store.store import ReleaseStore
from pipeline.serving.embedded import VERSION_LOCAL_STANDIN
from pipeline.serving.install import site_packages
from pipeline.serving.process import EmbeddedServer

MODEL_PY = """\
import json, os, sys
_p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sys_path.json")
if os.path.isfile(_p):  # the stub's interpreter ignores PYTHONPATH
    sys.path[:0] = [p for p in json.load(open(_p)) if p not in sys.path]
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = float(args["model_version"])

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "x").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", (x + self.version).astype(np.float32))]))
        return out
"""


ONNX_BYTES = b"tiny onnx stand-in: parity compared these bytes\n"


def sha256(data: bytes | Path) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else Path(data).read_bytes()).hexdigest()


def tiny_config(name: str = "tiny", batching: bool = False) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    cfg.input.add(name="x", data_type=mc.TYPE_FP32, dims=[4])
    cfg.output.add(name="y", data_type=mc.TYPE_FP32, dims=[4])
    cfg.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    if batching:
        cfg.dynamic_batching.max_queue_delay_microseconds = 100
    return cfg


# What tiny_repository's model_warmup runs (the repository stage's own renderer and file writer): 2 x batch 1 and
# 2 x batch 4, so Triton's statistics count 10 inferences for a version that warmed up and served nothing else.
WARMUP_SIZES, WARMUP_COUNT = [1, 4], 2
WARMUP_INFERENCES = WARMUP_COUNT * sum(WARMUP_SIZES)


def tiny_repository(
    root: Path,
    name: str = "tiny",
    version: str = "1",
    marker: str = "",
    onnx: bytes = ONNX_BYTES,
    warmup: float | None = None,
) -> Path:
    """``root/<name>/`` like the repository stage writes it; ``marker`` changes model.py's bytes, ``onnx`` model.onnx's.

    ``warmup``: every config gets a model_warmup fed one row of that value, written under ``<name>/warmup/``.
    """
    d = root / name
    (d / version).mkdir(parents=True, exist_ok=True)
    (d / version / "model.py").write_text(MODEL_PY + (f"# {marker}\n" if marker else ""))
    (d / version / "model.onnx").write_bytes(onnx)
    (d / version / "sys_path.json").write_text(json.dumps([str(p) for p in site_packages()]))
    (d / "configs").mkdir(exist_ok=True)
    configs = {"configs/latency.pbtxt": tiny_config(name), "configs/throughput.pbtxt": tiny_config(name, batching=True), "config.pbtxt": tiny_config(name)}
    if warmup is not None:
        import numpy as np

        from pipeline.core.config import WarmupConfig
        from pipeline.repository.warmup import add_warmup, write_files

        row = {"x": np.full((1, 4), warmup, np.float32)}
        write_files(d, row, batched=True)
        for cfg in configs.values():
            add_warmup(cfg, WarmupConfig(WARMUP_SIZES, WARMUP_COUNT), row, {"x": mc.TYPE_FP32})
    for rel, cfg in configs.items():
        (d / rel).write_text(text_format.MessageToString(cfg))
    return root


def parity_report(
    path: Path,
    ok: bool = True,
    failed: tuple[str, ...] = (),
    skipped: tuple[str, ...] = (),
    onnx: bytes | Path = ONNX_BYTES,
    model: str = "tiny",
    inputs: Path | None = None,
) -> Path:
    """A parity.json in the parity stage's format: schema, top-level ``passed``, per artifact status, sha256, outputs.

    The fp32 entry carries the sha256 of ``onnx`` (bytes or a file), so a repository holding
    those bytes as model.onnx is vouched for; fp16 has its own bytes. ``inputs`` is the samples
    file its ``reference`` names (``release build`` ships it for the canary).
    """
    shas = {"fp32": sha256(onnx), "fp16": sha256(b"fp16 " + (onnx if isinstance(onnx, bytes) else Path(onnx).read_bytes()))}
    arts: dict[str, dict] = {}
    for a in ("fp32", "fp16", *skipped):
        if a in skipped:
            arts[a] = {"status": "skipped", "passed": None, "reason": "no GPU"}
            continue
        good = a not in failed
        arts[a] = {
            "file": f"artifacts/onnx/model.{a}.onnx",
            "sha256": shas.get(a, sha256(a.encode())),
            "status": "passed" if good else "failed",
            "passed": good,
            "outputs": {"y": {"passed": good, "max_abs": 1e-7 if good else 0.5, "max_rel": 1e-6, "atol": 1e-4, "rtol": 1e-3}},
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    ref = {"reference": {"source": "onnx", "inputs": str(inputs)}} if inputs is not None else {}
    path.write_text(json.dumps({"schema": 1, "model": model, "passed": ok and not failed, "artifacts": arts, **ref}))
    return path


def sample_inputs(path: Path, feeds: int = 4, batch: int = 2, seed: int = 7) -> Path:
    """Polygraphy inputs JSON for the stand-in model (x[batch, 16]), as the parity stage saves its samples."""
    import numpy as np
    from polygraphy.json import save_json

    from tests.tiny_triton import FEATURES

    rng = np.random.default_rng(seed)
    save_json([{"x": rng.standard_normal((batch, FEATURES)).astype(np.float32)} for _ in range(feeds)], str(path), description="parity inputs")
    return path


def bench_report(path: Path, model_dir: Path, summary: dict | None = None, name: str | None = None) -> Path:
    """A bench.json that measured ``model_dir`` (its model.onnx and configs/*.pbtxt), with a bulky body beside the summary.

    Its header is written by the bench's own record (pipeline.records.bench), so it has the stage's format."""
    vdir = next(p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    configs = sorted((model_dir / "configs").glob("*.pbtxt"))
    measured = MeasuredModel(
        name or model_dir.name, str(vdir / "model.onnx"), vdir.name, {p.stem: str(p) for p in configs}, sha256(vdir / "model.onnx"), {p.stem: sha256(p) for p in configs}
    )
    report = BenchRecord(measured, summary if summary is not None else {"latency_p50_ms": 1.5}).to_json()
    report["variants"] = {"latency": {"curve": [{"concurrency": c, "p99_ms": 2.0 + c} for c in range(64)]}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report))
    return path


def dvc_lock(path: Path) -> Path:
    path.write_text(
        "schema: '2.0'\nstages:\n  repository:\n    cmd: python -m pipeline.stages.repository\n"
        "    deps:\n    - path: artifacts/onnx/model.sim.onnx\n      hash: md5\n      md5: 0123456789abcdef0123456789abcdef\n      size: 10\n"
        "    outs:\n    - path: artifacts/model_repository\n      hash: md5\n      md5: fedcba9876543210fedcba9876543210.dir\n      size: 20\n"
    )
    return path


def release_tiny(store: ReleaseStore, tmp: Path, repo: str = "repo", sign_key: Path | None = None, **kwargs: Any) -> BuildResult:
    """Release ``tiny_repository(tmp/<repo>, **kwargs)`` into ``store`` with a passing parity report and a dvc.lock
    beside it (``tmp/<repo>.parity.json``, ``tmp/<repo>.dvc.lock``), evidence unchecked, no git tag."""
    inputs = BuildInputs(tiny_repository(tmp / repo, **kwargs), parity_report(tmp / f"{repo}.parity.json"), None, dvc_lock(tmp / f"{repo}.dvc.lock"), git_cwd=tmp)
    return build_release(store, inputs, unchecked_evidence=True, sign_key=sign_key, tag=False)


def pointer_reads_while_flipping(
    store: ReleaseStore, read_config: Callable[[], str], flips: int, torn: type[Exception] | tuple[type[Exception], ...]
) -> tuple[set[tuple[int, ...]], list[Exception]]:
    """Flip 'dev' from v1 to v2 and back ``flips`` times while a thread reads its config.pbtxt (``read_config``) without
    pause: the live versions the reads named, and the errors of type ``torn`` they raised (where a torn or missing
    pointer would land)."""
    seen: set[tuple[int, ...]] = set()
    errors: list[Exception] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.add(tuple(pointer.live_versions(pointer.parse_config(read_config(), "r"))))
            except torn as e:
                errors.append(e)
            # Hand the GIL over between reads: without it each of the flipper's many file operations waits for the
            # interpreter's switch interval to get it back, and 15 flips took 18-32 s instead of well under 1.
            time.sleep(0)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(flips):
            promote(store, "dev", version=2)
            rollback(store, "dev")
    finally:
        stop.set()
        t.join()
    return seen, errors


def canary_record(status: str, **fields: Any) -> CanaryRecord:
    """The record of a canary of tiny v2 against live v1 in 'dev', started 2026-01-01 10:00 on h:8000; ``fields``: the rest."""
    return CanaryRecord(
        id="20260101T100000Z-v2",
        model="tiny",
        env="dev",
        live=1,
        candidate=2,
        variant="default",
        status=status,
        started_at="2026-01-01T10:00:00+00:00",
        server="h:8000",
        **fields,
    )


def retrain_onnx(path: Path) -> None:
    """New weights written to the same ONNX file, as a retrain does: same path, same graph, no param changes."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    w = m.graph.initializer[0]
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * 2, w.name))
    onnx.save(m, str(path))


# Appended to a stand-in's model.py: every execute sleeps first (a candidate slow on purpose).
SLOW = """
import time as _time

_run = TritonPythonModel.execute


def _slow(self, requests):
    _time.sleep({seconds})
    return _run(self, requests)


TritonPythonModel.execute = _slow
"""


def standin_repository(
    root: Path,
    seed: int,
    name: str = "tiny",
    onnx: Path | None = None,
    sleep_ms: float = 0.0,
    warmup: bool = False,
    backend: str = "python",
) -> Path:
    """``root/<name>/`` serving a real ONNX model through the python-backend ONNX Runtime stand-in.

    The model is ``tests/tiny_triton.py``'s x[batch,16] -> y[batch,8] with weights from ``seed``
    (or the ONNX file ``onnx``), so two seeds give two releases whose answers differ. ``sleep_ms``
    makes every execute sleep that long first. ``warmup``: its configs have a model_warmup (as the
    repository stage renders it) fed a row drawn from ``seed``, written under ``<name>/warmup/``.
    ``backend="onnxruntime"``: the config as the repository stage ships it and no python files, for a server started
    with ``ort_standin=True`` (native/pipeline_ort, whose version reloads never hit the python backend's abort below);
    ``sleep_ms`` needs the python one.
    """
    assert backend in ("python", "onnxruntime") and not (sleep_ms and backend != "python"), (backend, sleep_ms)
    from pipeline.serving.embedded import MODEL_PY
    from tests.tiny_triton import FEATURES, OUT, tiny_onnx

    d = root / name
    v = d / "1"
    v.mkdir(parents=True, exist_ok=True)
    if onnx is None:
        tiny_onnx(v / "model.onnx", seed)
    else:
        (v / "model.onnx").write_bytes(onnx.read_bytes())
    if backend == "python":
        (v / "python_standin.py").write_bytes(MODEL_PY.read_bytes())
        (v / "model.py").write_text(VERSION_LOCAL_STANDIN + (SLOW.format(seconds=sleep_ms / 1e3) if sleep_ms else ""))
        (v / "sys_path.json").write_text(json.dumps([str(p) for p in site_packages()]))
    cfg = mc.ModelConfig(name=name, backend=backend, max_batch_size=8)
    cfg.input.add(name="x", data_type=mc.TYPE_FP32, dims=[FEATURES])
    cfg.output.add(name="y", data_type=mc.TYPE_FP32, dims=[OUT])
    cfg.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    cfg.parameters["intra_op_thread_count"].string_value = "1"
    if warmup:
        import numpy as np

        from pipeline.core.config import WarmupConfig
        from pipeline.repository.warmup import add_warmup, write_files

        row = {"x": np.random.default_rng(seed).standard_normal((1, FEATURES)).astype(np.float32)}
        write_files(d, row, batched=True)
        add_warmup(cfg, WarmupConfig(WARMUP_SIZES, WARMUP_COUNT), row, {"x": mc.TYPE_FP32})
    (d / "configs").mkdir(exist_ok=True)
    (d / "configs" / "latency.pbtxt").write_text(text_format.MessageToString(cfg))
    (d / "config.pbtxt").write_text(text_format.MessageToString(cfg))
    return root


# The wheel's tritonserver sometimes aborts in a python-backend version reload ("malloc_consolidate(): unaligned
# fastbin chunk detected" or "tcache_thread_shutdown(): unaligned tcache chunk detected", then "Signal (6) received"
# while the instances of the old versions finalize), and then answers nothing: seen in the canary and fleet tests, in
# most full CI passes. That upstream abort is reported as an expected failure naming it, never as a pass; any other
# failure fails the test.
def triton_aborted(srv: EmbeddedServer) -> bool:
    """Whether the server reported that abort (SIGABRT)."""
    return signal.SIGABRT in srv.signals_caught()


def xfail_if_triton_aborted(srv: EmbeddedServer) -> None:
    """An xfail quoting the abort, once the server reported it; nothing otherwise."""
    if triton_aborted(srv):
        lines = [ln for ln in srv.log().splitlines() if "chunk detected" in ln or "Signal (6)" in ln][:2]
        pytest.xfail(f"tritonserver aborted in the version reload (heap corruption, upstream): {lines}")
