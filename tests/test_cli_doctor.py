"""`triton-pipeline doctor` reports what this machine can run, with the real tools."""

from __future__ import annotations

from typer.testing import CliRunner

from pipeline.cli import app


def test_doctor_finds_real_tools_and_reports_no_gpu() -> None:
    res = CliRunner().invoke(app, ["doctor"])
    assert res.exit_code == 0, res.output
    assert "tritonserver" in res.output and "perf_analyzer" in res.output
    assert "TensorRT" in res.output and "GPUs" in res.output
