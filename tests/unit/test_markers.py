"""The `slow` marker stays true: what the conftest guard counts as a server or a DVC subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["/venv/lib/pytriton/tritonserver/bin/tritonserver", "--model-repository=/m"], "tritonserver"),
        ([sys.executable, "-m", "dvc", "repro", "-q"], "a DVC subprocess"),
        ([sys.executable, "-m", "moto.server", "-p", "5000"], "an S3 server (moto)"),
        (["/venv/bin/perf_analyzer", "-m", "tiny"], "perf_analyzer"),
        (["ldd", "/venv/bin/perf_analyzer"], None),  # looks at a tool, runs no server
        (["/jdk/bin/java", "-version"], None),
        (["/venv/bin/perf_analyzer", "--version"], None),
        ([sys.executable, "-c", "print('dvc')"], None),
    ],
)
def test_what_counts_as_heavy(argv: list[str], what: str | None) -> None:
    assert conftest._heavy(argv) == what


def test_a_started_server_is_recorded_for_the_guard(tmp_path: Path) -> None:
    """A real process named tritonserver, started through subprocess, reaches the guard's record via the audit hook."""
    fake = tmp_path / "tritonserver"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    subprocess.run([str(fake)], check=True)
    assert conftest._started and conftest._started[-1].startswith("tritonserver: ")
    conftest._started.clear()  # this test is not slow: what it started is a stand-in that exits at once
