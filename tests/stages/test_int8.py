"""INT8 end to end on a tiny embedding model with an outlier channel: calibration from real samples, the quality gate
failing on a deliberately bad quantization (per-tensor weights), the automatic fallback repairing it, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.convert import export, simplify
from pipeline.convert.int8 import run_int8
from pipeline.core.config import PipelineConfig, load_config
from pipeline.core.errors import ParityError
from pipeline.parity.report import gate
from pipeline.parity.run import run_parity
from pipeline.stages import calibrate

EMBEDDER = [
    "model=cnn", "model.name=tinyemb", "model.factory._target_=tests.helpers.tiny_models.build_embedder",
    "~model.factory.num_classes", "~model.factory.width", "~model.factory.seed",
    "model.inputs=[{name: x, dtype: float32, shape: [batch, 16], low: -2.0, high: 2.0}]", "model.outputs=[embedding]",
    "~model.output_kinds", "+model.output_kinds={embedding: embedding}", "model.data={_target_: tests.helpers.tiny_models.embedder_samples}",
    "target_specs.cpu.precision=int8",  # the ONNX Runtime model serves INT8: its parity verdict gates the stage
]  # fmt: skip
PER_TENSOR = ["int8.per_channel=false", "int8.fallback.nodes_per_attempt=1"]


@pytest.fixture(scope="module")
def fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny embedder exported and simplified, as the export and simplify stages write it."""
    from pipeline.params import compose

    d = tmp_path_factory.mktemp("emb")
    (d / "params.yaml").write_text(compose(EMBEDDER))
    cfg = load_config(d / "params.yaml")
    export.run_export(cfg.model, cfg.export, d / "model.onnx")
    simplify.simplify(d / "model.onnx", d / "model.fp32.onnx", cfg.simplify, cfg.model)
    return d / "model.fp32.onnx"


def calibrated(make_params, fp32: Path, d: Path, *extra: str) -> tuple[PipelineConfig, Path, Path]:
    """The calibrate stage as DVC runs it: (config, params file, calibration set)."""
    params = make_params(*EMBEDDER, *extra)
    rc = calibrate.main(["--params", str(params), "--onnx", str(fp32), "--out", str(d / "samples.json"), "--report", str(d / "calibrate.json")])
    assert rc == 0
    return load_config(params), params, d / "samples.json"


def gated(cfg: PipelineConfig, fp32: Path, int8: Path, d: Path) -> dict:
    return run_parity(cfg, {"fp32": fp32, "int8": int8}, d / "inputs.json", d / "reference.json")


def test_calibration_from_real_samples_and_a_gated_int8_model(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path)
    cal = json.loads((tmp_path / "calibrate.json").read_text())
    assert (cal["rows"], cal["samples"], cal["real"]) == (48, 3, True) and "embedder_samples" in cal["source"]
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg)
    # The report carries the calibration set's identity, the method and the row count; per-channel passes at once.
    assert rep["calibration"]["sha256"] == cal["sha256"] and (rep["calibration"]["method"], rep["calibration"]["rows"]) == ("minmax", 48)
    assert rep["passed_on_calibration"] is True and len(rep["fallback"]["attempts"]) == 1 and rep["kept_fp32_count"] == 0
    assert {n["node"]: n["status"] for n in rep["nodes"]} == {"/fc1/Gemm": "int8", "/fc2/MatMul": "int8"}
    assert rep["size_bytes_int8"] < rep["size_bytes_fp32"]
    report = gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)
    q = report["artifacts"]["int8"]["outputs"]["embedding"]["quality"]
    assert report["passed"] and "int8" in report["gating"] and q["passed"] and q["metrics"]["cosine_min"] > 0.99


def test_per_tensor_weights_fail_the_gate_with_every_metric_and_its_passing_value(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, *PER_TENSOR, "int8.fallback.enabled=false")
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg)
    assert rep["passed_on_calibration"] is False and rep["fallback"]["blocked_count"] == 0
    report = gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)
    assert report["passed"] is False
    with pytest.raises(ParityError) as e:
        gate(report, "parity.json")
    text = e.value.render()
    for metric in ("cosine_min", "cosine_mean", "rank_agreement"):
        assert f"int8/embedding: embedding {metric}=" in text and f"passes with parity.int8.quality.{metric}=" in text


def test_fallback_keeps_the_outlier_layer_fp32_and_repairs_it(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, *PER_TENSOR)
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg)
    attempts = rep["fallback"]["attempts"]
    assert [a["passed"] for a in attempts] == [False, True]
    # One node per attempt: the outlier layer, found from per-layer error; the first layer stays INT8.
    assert [b["node"] for b in rep["fallback"]["blocked_nodes"]] == ["/fc2/MatMul"]
    assert {n["node"]: n["status"] for n in rep["nodes"]} == {"/fc1/Gemm": "int8", "/fc2/MatMul": "fp32"}
    assert rep["fallback"]["blocked_nodes"][0]["introduced"] > 0.5
    assert gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)["passed"] is True


def test_an_op_onnx_runtime_cannot_quantize_is_left_fp32_and_reported(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, "int8.op_types=[Gemm,MatMul,ReduceL2]")
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg)
    assert rep["op_types"] == ["Gemm", "MatMul"] and "no static quantizer for ReduceL2" in rep["op_types_left_fp32"]["ReduceL2"]
    assert any(n["op"] == "ReduceL2" and n["status"] == "fp32" and "no static quantizer" in n["reason"] for n in rep["nodes"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("int8.calibration.min_samples=100", "48 calibration sample rows, fewer than int8.calibration.min_samples=100"),
        ("+model.data.features=8", "does not fit the graph's ['batch', 16]"),
        ("+model.data.dtype=float64", "dtype float64, the graph takes float32"),
    ],
)
def test_calibration_samples_that_cannot_calibrate_fail_with_one_message(make_params, fp32: Path, tmp_path: Path, capsys, extra: str, message: str) -> None:
    params = make_params(*EMBEDDER, extra)
    rc = calibrate.main(["--params", str(params), "--onnx", str(fp32), "--out", str(tmp_path / "samples.json"), "--report", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert rc != 0 and message in err and "fix:" in err
    assert not (tmp_path / "samples.json").exists()
