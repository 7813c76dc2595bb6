"""Shared fixtures (project root, composed configs for tiny models, tiny ONNX files, built projects, an S3 server)
and the markers: what a test starts, added from its fixtures and checked against what it did start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.core.config import PipelineConfig, load_config
from tests.helpers.markers import PROCESS_MARKERS, STARTED, starts
from tests.helpers.project import Builds, Built, Recipe, build_once, composed

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["pytester"]  # tests/test_markers.py runs pytest on a conftest of its own

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


# ---------------------------------------------------------------- markers that are true
# A test carries `dvc`, `triton`, `torchserve` or `s3` when it starts that program: added here from the fixtures it
# uses (fixtures say what they start with `starts(...)`), or written on the test that starts one in its own body.
# Any of them, or `timing`, makes it `slow`, so `-m "not slow"` starts no server and no DVC subprocess. What a test
# really started is recorded (tests/helpers/markers.py); one without the marker of what it started fails.
# `timing` tests judge time (speedups, latency under load, intervals): they run alone, in a pass of their own.
def _fixture_markers(item: pytest.Item) -> set[str]:
    """The process markers of the fixtures ``item`` uses, directly or through other fixtures."""
    info = getattr(item, "_fixtureinfo", None)
    found: set[str] = set()
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in info.name2fixturedefs.get(name, ()) if info else ():
            found.update(getattr(fixturedef.func, "starts", ()))
    return found


# Cost of a test by what it starts, to send the long files first to xdist's workers (a long file begun last is
# the pass's tail): a built DVC project costs tens of seconds, a server a few, anything else less than one.
COST = {"dvc": 20.0, "torchserve": 10.0, "triton": 4.0, "s3": 3.0, "slow": 2.0}


def _cost(item: pytest.Item) -> float:
    return max((c for m, c in COST.items() if item.get_closest_marker(m)), default=0.1)


# The files holding `timing` tests, as collected before `-m` selects (tests/test_markers.py checks that each names
# the marker: the premise of pytest_ignore_collect below).
TIMING_FILES: set[Path] = set()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A run of ``-m timing`` alone (CI's serial pass) imports only the test files that name the marker, instead of all
    of them (about 8 CPU-s of collection). A `timing` test is marked in its own file, never from a fixture."""
    if (config.getoption("markexpr") or "").strip() != "timing" or not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
        return None
    return "timing" not in collection_path.read_text(encoding="utf-8") or None


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(_fixture_markers(item) - {m.name for m in item.iter_markers()}):
            item.add_marker(marker)
        if item.get_closest_marker("slow") is None and any(item.get_closest_marker(m) for m in (*PROCESS_MARKERS, "timing")):
            item.add_marker("slow")
        if item.get_closest_marker("timing"):
            TIMING_FILES.add(Path(str(item.fspath)))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: xdist needs one collection order
        per_file: dict[str, float] = {}
        for item in items:
            per_file[item.nodeid.split("::")[0]] = per_file.get(item.nodeid.split("::")[0], 0.0) + _cost(item)
        items.sort(key=lambda it: -per_file[it.nodeid.split("::")[0]])


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto`` (pyproject's addopts): every core for a run over folders, one process (no workers) for a
    run that judges time (``-m timing``) or builds engines on the one GPU (``-m gpu``), or that names files or single
    tests (a debugging run, where workers only cost their start-up)."""
    if re.search(r"(?<!not )\b(timing|gpu)\b", config.getoption("markexpr") or ""):
        return 0
    if config.args and all(a.split("::")[0].endswith(".py") for a in config.args):
        return 0
    return len(os.sched_getaffinity(0))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("timing") and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.skip("judges time: runs alone, in the serial pass (`python -m pytest -m timing`, without -n)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    STARTED.reset(watch=item.get_closest_marker("timing") is None)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """A test that passed but started a program without its marker fails, naming it."""
    rep: pytest.TestReport = yield
    if call.when == "call" and rep.passed and (missing := STARTED.missing(lambda m: item.get_closest_marker(m) is not None)):
        rep.outcome = "failed"
        rep.longrepr = f"{item.nodeid} started " + "; ".join(missing) + " (markers say what a test starts; see tests/helpers/markers.py)"
    return rep


@pytest.fixture
def root() -> Path:
    """The project checkout."""
    return ROOT


@pytest.fixture
def make_params(tmp_path: Path) -> Callable[..., Path]:
    """Compose conf/ with overrides (as `dvc exp run -S` would) into a params file under tmp_path."""

    def _make(*overrides: str, name: str = "params.yaml") -> Path:
        path = tmp_path / name
        path.write_text(composed(overrides), encoding="utf-8")
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
@starts("s3")
def s3():  # noqa: ANN201 - tests.helpers.s3.S3Server, imported lazily so the unit tests need no boto3
    """A real S3 HTTP API (moto's server mode) on a loopback port, for the whole session; make a bucket per test."""
    from tests.helpers.s3 import s3_server

    with s3_server() as server:
        yield server


def _run_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temp dir the whole run shares: under xdist every worker has one of its own, inside the run's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
@starts("dvc")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    """Projects built once per session, in the run's shared temp dir: one worker builds, the others wait for it and copy."""
    return Builds(_run_tmp(tmp_path_factory) / "builds")


@pytest.fixture(scope="session")
def minilm_onnx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """MiniLM, the default model, exported and simplified by the stage functions once per run (``raw`` and ``sim``
    paths; about 8 CPU-s), shared by the xdist workers like the built projects. Never to be changed: copy."""
    from pipeline.convert import export, simplify

    def build(where: Path) -> None:
        where.mkdir(parents=True)
        (where / "params.yaml").write_text(composed([]), encoding="utf-8")
        cfg = load_config(where / "params.yaml")
        export.run_export(cfg.model, cfg.export, where / "model.raw.onnx")
        simplify.simplify(where / "model.raw.onnx", where / "model.sim.onnx", cfg.simplify, cfg.model)

    done = build_once(_run_tmp(tmp_path_factory) / "minilm-onnx", build)
    return {k: done / f"model.{k}.onnx" for k in ("raw", "sim")}


@pytest.fixture
def built(builds: Builds, tmp_path: Path) -> Callable[[Recipe], Built]:
    """This test's own copy of a built project (tests.helpers.project.TWO or a Recipe of its own), at tmp_path/<name>."""
    return lambda recipe: builds.copy(recipe, tmp_path / recipe.name)
