"""Nothing optional blocks what was asked (issue 28): a precision no fleet target serves is built best effort.

On a graph whose FP16 conversion ONNX Runtime rejects (an ``If`` reading an outer-scope weight, beside a rank-0
input), the default fp32 fleet still gets through fp16, calibrate, int8 and parity: the failure is recorded (a
marker file, a report saying ``unavailable``) and parity lists the artifact as skipped; a calibration set that
does not exist stands in for the int8 file the same way.
A fleet that serves fp16 keeps the hard error, and no marker stands in for its file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.convert import calibration
from pipeline.core import optional
from pipeline.stages import calibrate, fp16, int8, parity
from tests.helpers.corpus import if_onnx
from tests.helpers.stages import parity_args

BASE = ["model=onnx", "model.name=vad"]


def _fp16(params: Path, src: Path, d: Path) -> int:
    return fp16.main(
        ["--params", str(params), "--onnx", str(src), "--out", str(d / "model.fp16.onnx"), "--report", str(d / "fp16.json"), "--metrics", str(d / "fp16.metrics.json")]
    )


def _int8(params: Path, src: Path, calibration: Path, d: Path, name: str) -> int:
    """int8 on ``src`` with ``calibration``, into ``d/model.<name>.onnx`` with its report ``d/<name>.json``."""
    return int8.main(["--params", str(params), "--onnx", str(src), "--calibration", str(calibration), "--out", str(d / f"model.{name}.onnx"), "--report", str(d / f"{name}.json")])


def test_optional_precisions_that_fail_are_recorded_and_block_nothing(make_params, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = if_onnx(tmp_path / "vad.onnx")
    params = make_params(*BASE, f"model.path={src}", "precision.fallback.enabled=false")  # no fallback: the FP16 graph stays invalid
    assert _fp16(params, src, tmp_path) == 0
    why = optional.reason(tmp_path / "model.fp16.onnx")
    assert why is not None and "ONNX Runtime cannot open the FP16 model" in why
    assert json.loads((tmp_path / "fp16.json").read_text())["status"] == "unavailable"
    assert json.loads((tmp_path / "fp16.metrics.json").read_text()) == {"status": "unavailable"}
    assert "fp16 not available (fp16_in_fleet=false, so this blocks nothing)" in capsys.readouterr().out

    # The rank-0 input stays rank 0 in the calibration set (np.ascontiguousarray made it [1]), so int8 is real here.
    assert calibrate.main(["--params", str(params), "--onnx", str(src), "--out", str(tmp_path / "samples.json"), "--report", str(tmp_path / "cal.json")]) == 0
    assert {f["sr"].shape for f in calibration.load(tmp_path / "samples.json")} == {()}
    assert _int8(params, src, tmp_path / "samples.json", tmp_path, "int8") == 0
    assert optional.reason(tmp_path / "model.int8.onnx") is None
    # A calibration set that could not be made: int8 records it in turn.
    optional.write(tmp_path / "none.json", "calibration set", "3 rows, fewer than int8.calibration.min_samples=8")
    assert _int8(params, src, tmp_path / "none.json", tmp_path, "int8b") == 0
    assert "the calibration set is not available: 3 rows" in str(optional.reason(tmp_path / "model.int8b.onnx"))

    rc = parity.main(parity_args(params, tmp_path, src, fp32=src, fp16=tmp_path / "model.fp16.onnx", int8=tmp_path / "model.int8b.onnx"))
    assert rc == 0
    rep = json.loads((tmp_path / "parity.json").read_text())
    assert rep["passed"] is True and rep["gating"] == ["fp32"]
    for kind in ("fp16", "int8"):
        assert rep["artifacts"][kind]["status"] == "skipped" and rep["artifacts"][kind]["reason"].startswith("not available: "), rep["artifacts"][kind]


def test_fp16_through_if_keeps_the_node_onnx_runtime_refuses_fp32(make_params, tmp_path: Path) -> None:
    """Finding 2: the If's branch read an outer weight the converter made FLOAT16; the node ORT names stays FP32,
    with its branches, and the branch reads the weight through a Cast. A fleet serving fp16 gets a gated artifact."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    src = if_onnx(tmp_path / "vad.onnx")
    params = make_params(*BASE, f"model.path={src}", "target_specs.cpu.precision=fp16")
    assert _fp16(params, src, tmp_path) == 0
    report = json.loads((tmp_path / "fp16.json").read_text())
    assert [r["node"] for r in report["ort_rejected"]] == ["If_2"] and "MatMul" in report["ort_rejected"][0]["error"]
    assert "If_2" in {k["node"] for k in report["kept_fp32"]}
    fp16_model = onnx.load(str(tmp_path / "model.fp16.onnx"))
    then = next(a.g for n in fp16_model.graph.node if n.op_type == "If" for a in n.attribute if a.name == "then_branch")
    assert then.node[0].op_type == "Cast"  # W, FLOAT16 outside, read as FLOAT inside
    a, b = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (src, tmp_path / "model.fp16.onnx"))
    for sr in (16000, 100):  # both branches
        feed = {"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), "sr": np.array(sr, np.int64)}
        assert np.abs(a.run(None, feed)[0] - b.run(None, feed)[0]).max() < 1e-2
    rc = parity.main(parity_args(params, tmp_path, src, fp32=src, fp16=tmp_path / "model.fp16.onnx"))
    rep = json.loads((tmp_path / "parity.json").read_text())
    assert rc == 0 and "fp16" in rep["gating"] and rep["artifacts"]["fp16"]["passed"] is True


def test_a_fleet_that_serves_fp16_keeps_the_hard_error(make_params, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = if_onnx(tmp_path / "vad.onnx")
    params = make_params(*BASE, f"model.path={src}", "target_specs.cpu.precision=fp16", "precision.fallback.enabled=false")
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


def test_per_channel_int8_of_an_opset_12_graph_loads(tmp_path: Path) -> None:
    """Finding 2: per-channel QDQ needs opset 13; the quantizer wrote `axis` into an opset-12 graph ONNX Runtime refused."""
    import numpy as np
    import onnxruntime as ort

    from pipeline.convert.int8 import quantize
    from pipeline.core.config import Int8Config
    from tests.helpers.corpus import conv_opset12_onnx

    src = conv_opset12_onnx(tmp_path / "ocr.onnx")
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    cfg = Int8Config()
    assert cfg.per_channel
    quantize(src, tmp_path / "q.onnx", cfg, feeds, ["Conv"], [], tmp_path / "cache")
    sess = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    assert sess.run(None, feeds[0])[0].shape == (1, 8, 16, 16)
    assert (tmp_path / "ocr.opset13.onnx").is_file()  # the converted graph the attempts share


def test_blocking_every_op_type_is_one_message_not_a_long_loop(make_params, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 6: every op type in precision.op_block_list made the fp16 stage run for over 10 minutes."""
    src = if_onnx(tmp_path / "vad.onnx")
    params = make_params(*BASE, f"model.path={src}", "precision.op_block_list=[Cast,Greater,If,Tanh]", "target_specs.cpu.precision=fp16")
    assert _fp16(params, src, tmp_path) != 0
    err = capsys.readouterr().err
    assert "blocks every op type of the graph: ['Cast', 'Greater', 'If', 'Tanh']" in err and "fix:" in err
