"""INT8 end to end on a tiny embedding model with an outlier channel: calibration from real samples, the split between
the calibration rows and the rows the gate judges on, the quality gate failing on a deliberately bad quantization
(per-tensor weights), the automatic fallback repairing it, its stop judged on validation rows it did not search on,
the search left out when no target serves INT8, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.convert import export, simplify
from pipeline.convert.int8 import run_int8
from pipeline.convert import calibration
from pipeline.core import holdout
from pipeline.core.config import PipelineConfig, load_config
from pipeline.core.errors import ParityError
from pipeline.parity.polygraphy import load_goldens
from pipeline.parity.report import gate
from pipeline.parity.run import run_parity
from pipeline.records.int8 import Int8Report
from pipeline.records.parity import ParityReport
from pipeline.stages import calibrate
from tests.helpers.project import DVC, commit, make_project, ran, sh
from tests.helpers.tiny_models import export_tiny_onnx

EMBEDDER = [
    "model=cnn",
    "model.name=tinyemb",
    "model.factory._target_=tests.helpers.tiny_models.build_embedder",
    "~model.factory.num_classes",
    "~model.factory.width",
    "~model.factory.seed",
    "model.inputs=[{name: x, dtype: float32, shape: [batch, 16], low: -2.0, high: 2.0}]",
    "model.outputs=[embedding]",
    "~model.output_kinds",
    "+model.output_kinds={embedding: embedding}",
    "model.data={_target_: tests.helpers.tiny_models.embedder_samples}",
    "target_specs.cpu.precision=int8",  # the ONNX Runtime model serves INT8: its parity verdict gates the stage
]
PER_TENSOR = ["int8.per_channel=false"]


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
    """The parity report on fp32 and int8, as the stage writes it."""
    return run_parity(cfg, {"fp32": fp32, "int8": int8}, d / "inputs.json", d / "reference.json").to_json()


def test_calibration_from_real_samples_and_a_gated_int8_model(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path)
    cal = json.loads((tmp_path / "calibrate.json").read_text())
    # Half of the hook's 48 rows calibrate; every other row is held out for the gate.
    assert (cal["rows"], cal["rows_available"], cal["samples"], cal["real"]) == (24, 48, 3, True) and "embedder_samples" in cal["source"]
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg).to_json()
    assert Int8Report.from_json(rep).to_json() == rep  # the record reads back exactly what the stage writes
    # The report carries the calibration set's identity, the method and the row count; per-channel passes at once.
    assert rep["calibration"]["sha256"] == cal["sha256"] and (rep["calibration"]["method"], rep["calibration"]["rows"]) == ("minmax", 24)
    assert rep["passed_on_calibration"] is True and rep["kept_fp32_count"] == 0
    assert rep["fallback"]["split"]["search"]["rows"] + rep["fallback"]["split"]["validation_rows"]["rows"] == 24
    # Smoothing is tried beside the plain graph: on this model it passes the search rows (its scales and ranges were
    # fitted there) and fails the validation rows, so the plain graph is written.
    plain, smoothed = rep["fallback"]["attempts"]
    assert (plain["graph"], plain["passed"], smoothed["graph"], smoothed["passed"]) == ("plain", True, "smoothed", False)
    assert smoothed["quality"]["search"]["embedding"]["passed"] and not smoothed["quality"]["validation"]["embedding"]["passed"]
    assert rep["smoothing"]["used"] is False and rep["smoothing"]["nodes"] == 2 and rep["fallback"]["chosen_attempt"] == 1
    assert rep["fallback"]["searched"] is False and "first quantization passes" in rep["fallback"]["not_searched"]
    assert {n["node"]: n["status"] for n in rep["nodes"]} == {"/fc1/Gemm": "int8", "/fc2/MatMul": "int8"}
    assert rep["size_bytes_int8"] < rep["size_bytes_fp32"]
    report = gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)
    q = report["artifacts"]["int8"]["outputs"]["embedding"]["quality"]
    assert report["passed"] and "int8" in report["gating"] and q["passed"] and q["metrics"]["cosine_min"] > 0.99


def test_per_tensor_weights_fail_the_gate_with_every_metric_and_its_passing_value(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, *PER_TENSOR, "int8.fallback.enabled=false")
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg).to_json()
    assert rep["passed_on_calibration"] is False and rep["fallback"]["blocked_count"] == 0
    report = gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)
    assert report["passed"] is False
    with pytest.raises(ParityError) as e:
        gate(ParityReport.from_json(report), "parity.json")
    text = e.value.render()
    for metric in ("cosine_min", "cosine_mean", "rank_agreement"):
        assert f"int8/embedding: embedding {metric}=" in text and f"passes with parity.int8.quality.{metric}=" in text


def test_fallback_keeps_the_outlier_layer_fp32_and_repairs_it(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, *PER_TENSOR)
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg).to_json()
    fb = rep["fallback"]
    # The 24 calibration rows split again: 12 rank the nodes, 12 validate the stop.
    assert (fb["split"]["search"]["rows"], fb["split"]["validation_rows"]["rows"]) == (12, 12)
    assert [(a["graph"], a["fallback_nodes"], a["passed"]) for a in fb["attempts"]] == [("plain", 0, False), ("smoothed", 0, False), ("plain", 1, True)]
    assert fb["chosen_attempt"] == 3
    # The outlier layer ranks first by the error it introduces on the search rows; the first layer stays INT8.
    assert [r["node"] for r in fb["ranking"]] == ["/fc2/MatMul", "/fc1/Gemm"] and fb["ranking"][0]["introduced"] > 0.5
    assert [b["node"] for b in fb["blocked_nodes"]] == ["/fc2/MatMul"] and "pass the stop rule (attempt 3)" in fb["blocked_nodes"][0]["reason"]
    assert {n["node"]: n["status"] for n in rep["nodes"]} == {"/fc1/Gemm": "int8", "/fc2/MatMul": "fp32"}
    assert rep["passed_on_calibration"] is True and rep["quality_on_calibration"]["validation"]["embedding"]["passed"]
    assert gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)["passed"] is True


# Every hook row but each fourth is quiet (scaled down): the search rows (hook rows 0, 4, 8, ...) are all loud, the
# validation rows (2, 6, ...) and the held-out rows (odd) quiet, which activation ranges set by loud rows round coarsely.
# Without smoothing, so that the stop rule alone decides.
UNREPRESENTATIVE = ["+model.data.quiet_every=4", "+model.data.quiet_at=[1,2,3]", "int8.smoothing=null"]


def test_the_validation_rows_stop_the_search_later_than_the_search_rows_would(make_params, fp32: Path, tmp_path: Path) -> None:
    """Rows the search never looked at decide when it stops: here the all-INT8 model passes every threshold on the
    search rows, so a search judged on them alone stops at once and ships a model the gate refuses; the validation rows
    fail it, the search keeps the worst layer FP32, and the gate passes that model on the held-out rows."""
    # The bare rule (no margin asked for): what decides here is which rows judge, not how far past the threshold.
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, *UNREPRESENTATIVE, "int8.fallback.min_margin=0")
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg).to_json()
    first, last = rep["fallback"]["attempts"][0], rep["fallback"]["attempts"][-1]
    assert all(c["search"] >= c["threshold"] for c in first["checks"].values()) and first["quality"]["search"]["embedding"]["passed"]
    assert not first["passed"] and first["checks"]["embedding.rank_agreement"]["validation"] < 0.98
    assert last["passed"] and last["fallback_nodes"] == 1 and rep["kept_fp32_count"] == 1
    assert gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)["passed"] is True

    # What stopping on the search rows would have written: the first quantization, which the held-out rows fail.
    once, _, samples = calibrated(make_params, fp32, tmp_path, *UNREPRESENTATIVE, "int8.fallback.min_margin=0", "int8.fallback.max_attempts=1")
    run_int8(fp32, samples, tmp_path / "once.int8.onnx", once)
    report = gated(once, fp32, tmp_path / "once.int8.onnx", tmp_path)
    q = report["artifacts"]["int8"]["outputs"]["embedding"]["quality"]
    assert report["passed"] is False and q["metrics"]["rank_agreement"] < 0.98 and q["metrics"]["cosine_min"] > 0.98

    # A margin asked for (the default): an attempt passes only when it leaves that share of every error budget, so the
    # one node that sufficed above no longer does, and at least as many stay FP32.
    wide, _, samples = calibrated(make_params, fp32, tmp_path, *UNREPRESENTATIVE, "int8.fallback.min_margin=0.75")
    rep = run_int8(fp32, samples, tmp_path / "wide.int8.onnx", wide).to_json()
    attempts = rep["fallback"]["attempts"]
    assert all(a["passed"] == (a["margin"] >= 0.75) for a in attempts) and rep["kept_fp32_count"] >= 1
    assert any(0 <= a["margin"] < 0.75 for a in attempts)  # passed the bare rule, refused here


def test_an_op_onnx_runtime_cannot_quantize_is_left_fp32_and_reported(make_params, fp32: Path, tmp_path: Path) -> None:
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, "int8.op_types=[Gemm,MatMul,ReduceL2]")
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg).to_json()
    assert rep["op_types"] == ["Gemm", "MatMul"] and "no static quantizer for ReduceL2" in rep["op_types_left_fp32"]["ReduceL2"]
    assert any(n["op"] == "ReduceL2" and n["status"] == "fp32" and "no static quantizer" in n["reason"] for n in rep["nodes"])


def test_the_gate_judges_rows_that_calibration_never_saw(make_params, fp32: Path, tmp_path: Path) -> None:
    """The split is visible in both reports: calibration and parity take disjoint halves of the hook's rows, by count,
    by the hook's row indices and by content hash, and parity judges INT8 on the held-out half."""
    cfg, _, samples = calibrated(make_params, fp32, tmp_path)
    split = json.loads((tmp_path / "calibrate.json").read_text())["split"]
    cal, held = split["calibration"], split["held_out"]
    assert (cal["rows"], held["rows"], split["holdout"], split["unit"]) == (24, 24, 0.5, "row")
    assert held["units"] == list(range(1, 48, 2)) and sorted(cal["units"] + held["units"]) == list(range(48))
    run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg)
    report = gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)
    ref = report["reference"]
    assert (ref["rows"], ref["sha256"], ref["calibration_rows_left_out"]) == (24, held["sha256"], 24)
    # By content: no row of the calibration file is among the rows parity saved as its goldens and judged.
    judged = holdout.row_digests(load_goldens(tmp_path / "inputs.json", tmp_path / "reference.json")[0])
    calibrated_rows = holdout.row_digests(calibration.load(samples))
    assert len(set(judged)) == 24 and len(set(calibrated_rows)) == 24 and not set(judged) & set(calibrated_rows)
    assert holdout.digest(calibration.load(samples)) == cal["sha256"]
    assert report["artifacts"]["int8"]["outputs"]["embedding"]["quality"]["passed"]


def test_without_int8_in_the_fleet_the_fallback_search_does_not_run(make_params, fp32: Path, tmp_path: Path) -> None:
    """The default fleet serves fp32: the INT8 file is quantized once, parity reports its quality without gating on it,
    and the report says why no node was searched for."""
    cfg, _, samples = calibrated(make_params, fp32, tmp_path, *PER_TENSOR, "target_specs.cpu.precision=fp32")
    assert cfg.int8_in_fleet is False
    rep = run_int8(fp32, samples, tmp_path / "model.int8.onnx", cfg).to_json()
    fb = rep["fallback"]
    assert len(fb["attempts"]) == 2 and fb["blocked_count"] == 0 and fb["searched"] is False and rep["passed_on_calibration"] is False
    assert "int8_in_fleet=false" in fb["not_searched"]
    report = gated(cfg, fp32, tmp_path / "model.int8.onnx", tmp_path)
    assert report["passed"] is True and "int8" not in report["gating"]
    assert report["artifacts"]["int8"]["outputs"]["embedding"]["quality"]["passed"] is False


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "int8.calibration.min_samples=100",
            "48 sample rows from model.data: int8.calibration.holdout=0.5 leaves 24 to calibrate "
            "(int8.calibration.min_samples=100) and 24 held out for the parity gate (int8.calibration.min_holdout=8)",
        ),
        ("int8.calibration.min_holdout=30", "leaves 24 to calibrate (int8.calibration.min_samples=8) and 24 held out for the parity gate (int8.calibration.min_holdout=30)"),
        ("+model.data.repeat=true", "24 held-out rows of model.data are exact copies of calibration rows"),
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


@pytest.mark.dvc
def test_editing_held_out_rows_reruns_parity_but_never_int8(tmp_path: Path) -> None:
    """Real `dvc repro`: new values in held-out rows of a data file rerun calibrate (it reads the data) and parity, but
    calibrate writes the very same calibration set, so the int8 stage, which depends on that file alone, is skipped."""
    from polygraphy.json import load_json, save_json

    rng = np.random.default_rng(5)
    data = [{"x": rng.normal(size=(8, 8)).astype(np.float32)} for _ in range(4)]  # 32 rows: 16 calibrate, 16 held out

    def tiny(p: Path) -> None:
        (p / "models").mkdir()
        export_tiny_onnx(str(p / "models" / "tiny.onnx"))
        (p / "data").mkdir()
        save_json(data, str(p / "data" / "samples.json"))

    overrides = [
        "model=onnx",
        "model.name=tiny",
        "model.path=models/tiny.onnx",
        "model.data={path: data/samples.json}",
        "~model.output_kinds",
        "+model.output_kinds={y: classifier}",
    ]
    proj = make_project(tmp_path / "proj", overrides, prepare=tiny)
    commit(proj, "init")
    reports = proj / "artifacts" / "reports"
    first = sh(proj, *DVC, "repro", "parity")
    assert {"calibrate", "int8", "parity"} <= set(ran(first.stdout)), first.stdout
    cal, par = (json.loads((reports / f"{n}.json").read_text()) for n in ("calibrate", "parity"))
    calibration_set = (proj / "artifacts" / "calibration" / "samples.json").read_bytes()
    assert par["reference"]["sha256"] == cal["split"]["held_out"]["sha256"] and par["reference"]["rows"] == 16

    feeds = load_json(str(proj / "data" / "samples.json"))
    for f in feeds:
        f["x"][1::2] += 0.5  # rows 1, 3, 5, 7 of every sample of 8: held out
    save_json(feeds, str(proj / "data" / "samples.json"))
    second = sh(proj, *DVC, "repro", "parity")
    stages = ran(second.stdout)
    assert "calibrate" in stages and "parity" in stages and "int8" not in stages, second.stdout
    cal2, par2 = (json.loads((reports / f"{n}.json").read_text()) for n in ("calibrate", "parity"))
    assert (proj / "artifacts" / "calibration" / "samples.json").read_bytes() == calibration_set
    assert cal2["split"]["calibration"]["sha256"] == cal["split"]["calibration"]["sha256"]
    assert par2["reference"]["sha256"] == cal2["split"]["held_out"]["sha256"] != par["reference"]["sha256"]
