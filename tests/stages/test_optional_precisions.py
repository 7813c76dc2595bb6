"""Nothing optional blocks what was asked (issue 28): a precision no fleet target serves is built best effort.

On a graph whose FP16 conversion ONNX Runtime rejects (an ``If`` reading an outer-scope weight) and whose rank-0
input the calibration set cannot fit, the default fp32 fleet still gets through fp16, calibrate, int8 and parity:
each failure is recorded (a marker file, a report saying ``unavailable``) and parity lists the artifact as skipped.
A fleet that serves fp16 keeps the hard error, and no marker stands in for its file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core import optional
from pipeline.stages import calibrate, fp16, int8, parity
from tests.helpers.corpus import if_onnx

BASE = ["model=onnx", "model.name=vad"]


def _fp16(params: Path, src: Path, d: Path) -> int:
    return fp16.main(["--params", str(params), "--onnx", str(src), "--out", str(d / "model.fp16.onnx"), "--report", str(d / "fp16.json"),
                      "--metrics", str(d / "fp16.metrics.json")])  # fmt: skip


def test_optional_precisions_that_fail_are_recorded_and_block_nothing(make_params, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = if_onnx(tmp_path / "vad.onnx")
    params = make_params(*BASE, f"model.path={src}")
    assert _fp16(params, src, tmp_path) == 0
    why = optional.reason(tmp_path / "model.fp16.onnx")
    assert why is not None and "ONNX Runtime cannot open the FP16 model" in why
    assert json.loads((tmp_path / "fp16.json").read_text())["status"] == "unavailable"
    assert json.loads((tmp_path / "fp16.metrics.json").read_text()) == {"status": "unavailable"}
    assert "fp16 not available (fp16_in_fleet=false, so this blocks nothing)" in capsys.readouterr().out

    assert calibrate.main(["--params", str(params), "--onnx", str(src), "--out", str(tmp_path / "samples.json"), "--report", str(tmp_path / "cal.json")]) == 0
    assert int8.main(["--params", str(params), "--onnx", str(src), "--calibration", str(tmp_path / "samples.json"),
                      "--out", str(tmp_path / "model.int8.onnx"), "--report", str(tmp_path / "int8.json")]) == 0  # fmt: skip
    assert optional.reason(tmp_path / "model.int8.onnx") is not None

    rc = parity.main(["--params", str(params), "--source-onnx", str(src), "--fp32", str(src), "--fp16", str(tmp_path / "model.fp16.onnx"),
                      "--int8", str(tmp_path / "model.int8.onnx"), "--inputs", str(tmp_path / "in.json"), "--reference", str(tmp_path / "ref.json"),
                      "--report", str(tmp_path / "parity.json")])  # fmt: skip
    assert rc == 0
    rep = json.loads((tmp_path / "parity.json").read_text())
    assert rep["passed"] is True and rep["gating"] == ["fp32"]
    for kind in ("fp16", "int8"):
        assert rep["artifacts"][kind]["status"] == "skipped" and rep["artifacts"][kind]["reason"].startswith("not available: "), rep["artifacts"][kind]


def test_a_fleet_that_serves_fp16_keeps_the_hard_error(make_params, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = if_onnx(tmp_path / "vad.onnx")
    params = make_params(*BASE, f"model.path={src}", "target_specs.cpu.precision=fp16")
    assert _fp16(params, src, tmp_path) != 0
    assert "ERROR [fp16] ONNX Runtime cannot open the FP16 model" in capsys.readouterr().err
    assert not (tmp_path / "model.fp16.onnx").exists() and not (tmp_path / "fp16.json").exists()


def test_the_marker_is_read_from_its_first_bytes_only(tmp_path: Path) -> None:
    optional.write(tmp_path / "m.onnx", "int8", "no calibration rows")
    assert optional.reason(tmp_path / "m.onnx") == "no calibration rows"
    (tmp_path / "real.onnx").write_bytes(b"\x08\x07" + b"\x00" * 1000)  # any ONNX protobuf starts otherwise
    assert optional.reason(tmp_path / "real.onnx") is None and optional.reason(tmp_path / "absent.onnx") is None
    (tmp_path / "bad.onnx").write_text('{"pipeline_unavailable": ')
    assert optional.reason(tmp_path / "bad.onnx") == "marked unavailable (unreadable marker)"
