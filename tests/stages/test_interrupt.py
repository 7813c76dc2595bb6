"""Ctrl-C prints one line and no traceback, wherever it lands: mid-import of a stage, or while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.params import compose
from tests.helpers.project import ROOT

pytestmark = pytest.mark.slow

ENTRY_POINTS = [
    # The cnn export: seconds of imports (torch, onnx) and work, the window the stage is most often interrupted in.
    ["-m", "pipeline.stages.export", "--params", "{tmp}/params.yaml", "--out", "{tmp}/model.onnx", "--report", "{tmp}/r.json"],
    # An unknown model group: composition fails if it gets that far, so params.yaml is never rewritten here.
    ["-m", "pipeline.params", "model=__no_such_model__"],
    ["-m", "pipeline.cli", "release", "list", "--store", "{tmp}/store"],
]


def interrupt(args: list[str], delay: float) -> subprocess.CompletedProcess[str]:
    """Start ``python args``; once the ``pipeline`` package is imported, wait ``delay`` s and press Ctrl-C.

    ``-X importtime`` reports each import as it completes, so the signal never lands in the interpreter's own
    start-up (site), which no program can guard, but anywhere from our first import on.
    """
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None and proc.stdout is not None
    err: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            if line.startswith("import time:") and line.split("|")[-1].strip() == "pipeline":
                ready.set()
            elif not line.startswith("import time:"):
                err.append(line)
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(timeout=60)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out = proc.stdout.read()
    proc.wait(timeout=120)
    reader.join(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(err))


@pytest.mark.parametrize("argv", ENTRY_POINTS, ids=["stage", "params", "cli"])
def test_ctrl_c_prints_no_traceback(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text(compose(["model=cnn"]), encoding="utf-8")
    interrupted = 0
    # From right after our package is imported, through the heavy imports (onnx, dvc, typer), into the work.
    for delay in (0.0, 0.05, 0.2, 0.5):
        res = interrupt([a.replace("{tmp}", str(tmp_path)) for a in argv], delay)
        assert "Traceback" not in res.stdout + res.stderr, f"after {delay} s:\n{res.stderr}"
        if res.returncode in (-signal.SIGINT, 130):
            interrupted += 1
            assert "interrupted" in res.stderr, res.stderr
            assert not (tmp_path / "model.onnx").exists(), "an interrupted export left its output behind"
        (tmp_path / "model.onnx").unlink(missing_ok=True)
    assert interrupted >= 2, "the signal should have landed during the run at least twice"
