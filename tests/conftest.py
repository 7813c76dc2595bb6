"""Shared fixtures: project root, composed configs for tiny models, tiny ONNX files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.core.config import PipelineConfig, load_config
from pipeline.params import compose

ROOT = Path(__file__).resolve().parent.parent

# A runner started in the background by a non-interactive shell (`cmd &`) inherits SIGINT ignored, and so would
# every child: Python started that way installs no KeyboardInterrupt handler, and the tests that press Ctrl-C on a
# stage would see it ignored. A handled signal is reset to its default across exec, so this restores Ctrl-C for all.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TINY_MLP = [
    "model=cnn",  # any factory model group; the keys below replace its contents
    "model.name=tiny",
    "model.factory._target_=tests.helpers.tiny_models.build_mlp",
    "~model.factory.num_classes",
    "~model.factory.width",
    "~model.factory.seed",
    "model.inputs=[{name: x, dtype: float32, shape: [batch, 8], low: -1.0, high: 1.0}]",
    "model.outputs=[y]",
]


# ---------------------------------------------------------------- `-m "not slow"` stays hermetic
# What makes a test slow: a server or a DVC subprocess. Every process a test starts raises the "subprocess.Popen"
# audit event (subprocess.run and check_output go through it too); a test that starts one of these without the
# `slow` marker fails, naming the command, so the marker stays true as tests are added.
HEAVY = {
    "tritonserver": "tritonserver",
    "perf_analyzer": "perf_analyzer",
    "moto.server": "an S3 server (moto)",
    "torchserve": "TorchServe",
    "java": "a JVM",
    "dvc": "a DVC subprocess",
}
_started: list[str] = []


def _heavy(args: object) -> str | None:
    """What ``args`` starts, when it is a server or DVC: the program run, or the module of ``python -m``
    (``ldd perf_analyzer`` or ``java -version`` only look at a tool)."""
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    if not argv or {"-version", "--version"} & set(argv):
        return None
    python_m = len(argv) > 2 and argv[1] == "-m" and Path(argv[0]).name.startswith("python")
    prog = argv[2] if python_m else Path(argv[0]).name
    return HEAVY.get(prog)


def _audit(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and len(args) > 1 and (what := _heavy(args[1])):
        _started.append(f"{what}: {' '.join(str(a) for a in args[1])[:160]}")


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def _not_slow_is_hermetic(request: pytest.FixtureRequest):  # noqa: ANN202 - a generator fixture
    """Fail a test without the ``slow`` marker that started a server or a DVC subprocess."""
    _started.clear()
    yield
    if _started and request.node.get_closest_marker("slow") is None:
        pytest.fail(
            f"{request.node.nodeid} started {_started[0]} but is not marked slow (`-m 'not slow'` must start no server and no DVC subprocess): add @pytest.mark.slow", pytrace=False
        )


@pytest.fixture
def root() -> Path:
    """The project checkout."""
    return ROOT


@pytest.fixture
def make_params(tmp_path: Path) -> Callable[..., Path]:
    """Compose conf/ with overrides (as `dvc exp run -S` would) into a params file under tmp_path."""

    def _make(*overrides: str, name: str = "params.yaml") -> Path:
        path = tmp_path / name
        path.write_text(compose(list(overrides)), encoding="utf-8")
        return path

    return _make


@pytest.fixture
def tiny_cfg(make_params: Callable[..., Path]) -> Callable[..., PipelineConfig]:
    """A validated config for the tiny MLP, with extra overrides."""

    def _cfg(*extra: str) -> PipelineConfig:
        return load_config(make_params(*TINY_MLP, *extra))

    return _cfg


@pytest.fixture
def tiny_onnx(tmp_path: Path) -> Path:
    """A tiny ONNX file with input x [batch, 8] and output y [batch, 4]."""
    from tests.helpers.tiny_models import export_tiny_onnx

    return Path(export_tiny_onnx(str(tmp_path / "tiny.onnx")))


def run_module(module: str, *args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module args`` as a user would, with the project importable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def s3():  # noqa: ANN201 - tests.helpers.s3.S3Server, imported lazily so the unit tests need no boto3
    """A real S3 HTTP API (moto's server mode) on a loopback port, for the whole session; make a bucket per test."""
    from tests.helpers.s3 import s3_server

    with s3_server() as server:
        yield server
