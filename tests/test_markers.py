"""The markers stay true: what counts as a server or a DVC subprocess, that it is seen however it is started, and
that the markers come from the fixtures a test uses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.markers import STARTED, heavy


@pytest.mark.parametrize(
    ("argv", "marker"),
    [
        (["/venv/lib/pytriton/tritonserver/bin/tritonserver", "--model-repository=/m"], "triton"),
        ([sys.executable, "-m", "dvc", "repro", "-q"], "dvc"),
        ([sys.executable, "-m", "moto.server", "-p", "5000"], "s3"),
        (["/venv/bin/perf_analyzer", "-m", "tiny"], "triton"),
        (["/venv/bin/torchserve", "--start", "--foreground"], "torchserve"),
        (["/venv/bin/python3", "/venv/bin/torchserve", "--start"], "torchserve"),  # a console script, as /proc shows it
        (["/jdk/bin/java", "-Dmodel_server_home=/x", "org.pytorch.serve.ModelServer"], "torchserve"),
        (["ldd", "/venv/bin/perf_analyzer"], None),  # looks at a tool, runs no server
        (["/jdk/bin/java", "-version"], None),
        (["/venv/bin/perf_analyzer", "--version"], None),
        ([sys.executable, "-c", "print('dvc')"], None),
    ],
)
def test_what_counts_as_heavy(argv: list[str], marker: str | None) -> None:
    assert heavy(argv) == marker


def _stand_in(tmp_path: Path, name: str) -> Path:
    """A program called ``name`` that sleeps for its argument's seconds (a copy of sleep: /proc shows its own name)."""
    fake = tmp_path / name
    if not fake.exists():
        shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    return fake


def test_a_started_server_is_recorded_for_the_guard(tmp_path: Path) -> None:
    """A process named tritonserver, started through subprocess, reaches the record via the audit hook."""
    fake = _stand_in(tmp_path, "tritonserver")
    subprocess.run([str(fake), "0"], check=True)
    assert STARTED.seen and STARTED.seen[-1][0] == "triton"
    assert STARTED.missing(lambda m: False) == [f"tritonserver or perf_analyzer (`{fake} 0`): add @pytest.mark.triton"]
    STARTED.seen.clear()  # this test is not slow: what it started is a stand-in that exits at once


def test_a_server_a_child_started_is_recorded_too(tmp_path: Path) -> None:
    """A server started by a child process (a stage run with `python -m`) is seen by the /proc watcher."""
    fake = _stand_in(tmp_path, "tritonserver")
    child = subprocess.Popen([sys.executable, "-c", f"import subprocess; subprocess.run([{str(fake)!r}, '1'])"])
    deadline = time.monotonic() + 10
    while not any(m == "triton" for m, _ in STARTED.seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    child.wait()
    assert [m for m, _ in STARTED.seen] == ["triton"], STARTED.seen
    STARTED.seen.clear()


@pytest.fixture
def project_conftest(request: pytest.FixtureRequest, pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytest run in a temp dir with this project's conftest, a fixture that starts triton and one that uses it."""
    pytester.makeconftest(
        """
import pytest
from tests.helpers.markers import starts

pytest_plugins = ["tests.conftest"]

@pytest.fixture
@starts("triton")
def server():
    return "srv"

@pytest.fixture
def client(server):
    return server
"""
    )
    pytester.makeini("[pytest]\nmarkers =\n  slow\n  timing\n  triton\n  dvc\n  torchserve\n  s3\n")
    pytester.syspathinsert(str(request.config.rootpath))
    return pytester


def collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    res = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    return [ln.split("::")[1] for ln in res.outlines if "::" in ln]


def test_markers_come_from_the_fixtures_a_test_uses(project_conftest: pytest.Pytester) -> None:
    """A fixture that says what it starts marks every test using it, through other fixtures too, and makes it slow."""
    project_conftest.makepyfile(
        """
import pytest

def test_uses_client(client): pass

def test_plain(): pass

@pytest.mark.timing
def test_judges_time(): pass
"""
    )
    assert collected(project_conftest, "-m", "slow") == ["test_uses_client", "test_judges_time"]
    assert collected(project_conftest, "-m", "triton") == ["test_uses_client"]
    assert collected(project_conftest, "-m", "not slow") == ["test_plain"]


def test_a_test_that_starts_a_server_without_its_marker_fails(project_conftest: pytest.Pytester, tmp_path: Path) -> None:
    fake = _stand_in(tmp_path, "tritonserver")
    project_conftest.makepyfile(
        f"""
import subprocess
import pytest

def test_unmarked():
    subprocess.run([{str(fake)!r}, "0"])

@pytest.mark.triton
def test_marked():
    subprocess.run([{str(fake)!r}, "0"])
"""
    )
    res = project_conftest.runpytest("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=1)
    assert any("test_unmarked started tritonserver or perf_analyzer" in ln and "add @pytest.mark.triton" in ln for ln in res.outlines), res.outlines
    STARTED.seen.clear()


@pytest.mark.parametrize(
    ("args", "workers"),
    [
        ([], "cores"),
        (["-m", "not slow"], "cores"),
        (["-m", "not timing"], "cores"),
        (["tests/core", "tests/stats"], "cores"),
        (["-m", "timing"], 0),
        (["-m", "slow and timing"], 0),
        (["-m", "gpu", "tests/gpu"], 0),
        (["tests/core/test_config.py"], 0),
        (["tests/core/test_config.py::test_x", "tests/stats/test_estimate.py"], 0),
    ],
)
def test_the_default_run_uses_every_core_except_for_timing_and_named_tests(pytester: pytest.Pytester, args: list[str], workers: object) -> None:
    """pyproject's `-n auto` starts one worker per core for a run over folders, none for `-m timing` (judged alone)
    or for named files and tests."""
    from tests.conftest import pytest_xdist_auto_num_workers

    config = pytester.parseconfig("-p", "no:cacheprovider", *args)
    assert pytest_xdist_auto_num_workers(config) == (len(os.sched_getaffinity(0)) if workers == "cores" else workers)


def test_every_timing_test_is_in_a_file_that_names_the_marker() -> None:
    """The serial pass (`-m timing`) imports only the files that contain "timing" (conftest's pytest_ignore_collect)."""
    from tests.conftest import TIMING_FILES

    if not TIMING_FILES:
        pytest.skip("no timing test collected in this run (a run of named files): the whole suite's run checks this")
    assert [f for f in sorted(TIMING_FILES) if "timing" not in f.read_text(encoding="utf-8")] == []
