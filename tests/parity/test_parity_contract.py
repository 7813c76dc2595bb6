"""Gates that mean what they say: the I/O contract, per-position classifier agreement, degenerate references.

Every model here is a tiny ONNX graph built in the test and run by the real stages (onnxconverter-common, ONNX Runtime,
Polygraphy); each case failed on the code before this contract existed (an FP16 output, a flattened argmax, a pass on
rows of one class).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from pipeline.core.config import load_config
from pipeline.core.specs import graph_io
from pipeline.parity.report import failures
from pipeline.records.parity import ParityReport
from pipeline.repository import config as triton_config
from pipeline.repository.served import Served
from pipeline.repository.writer import write_repository
from pipeline.stages import parity
from tests.helpers.corpus import save_graph
from tests.helpers.stages import build_precisions, parity_args


def detector(path: Path) -> Path:
    """A detector head and a recurrent state: x [batch, 16] -> MatMul -> Sigmoid (y); state -> MatMul -> Tanh (stateN).

    Both last nodes are the ones the FP16 fallback keeps in FP32 on real models (a Sigmoid whose outputs are mostly
    FP16-subnormal; a recurrent state)."""
    rng = np.random.default_rng(0)
    g = h.make_graph(
        [
            h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
            h.make_node("Sigmoid", ["mm"], ["y"], name="sig"),
            h.make_node("MatMul", ["state", "U"], ["sm"], name="smm"),
            h.make_node("Tanh", ["sm"], ["stateN"], name="stanh"),
        ],
        "detector",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", 16]), h.make_tensor_value_info("state", T.FLOAT, ["batch", 8])],
        [h.make_tensor_value_info("y", T.FLOAT, ["batch", 8]), h.make_tensor_value_info("stateN", T.FLOAT, ["batch", 8])],
        [nh.from_array(rng.normal(size=(16, 8)).astype(np.float32), "W"), nh.from_array(rng.normal(size=(8, 8)).astype(np.float32), "U")],
    )
    return save_graph(g, path)


def build(params: Path, d: Path) -> dict[str, Path]:
    return build_precisions(load_config(params), d)


def samples(path: Path, rows: int = 48) -> str:
    """Real-looking samples for model.data (INT8 is served only on real samples): x [rows, 8] in [-1, 1]."""
    np.savez(path, x=np.random.default_rng(3).uniform(-1, 1, (rows, 8)).astype(np.float32))
    return f"model.data={{path: {path}}}"


def run_parity(params: Path, d: Path, **files: Path) -> tuple[int, dict]:
    """The parity stage on ``files`` (``raw=`` the source, then the artifacts by precision): its exit code and report."""
    return parity.main(parity_args(params, d, files.pop("raw"), **files)), json.loads((d / "parity.json").read_text())


def test_fp16_whose_last_nodes_stay_fp32_keeps_fp32_outputs_and_parity_refuses_a_dtype_change(make_params, tmp_path: Path) -> None:
    src = detector(tmp_path / "detector.onnx")
    # A fleet that serves the FP16 file, so its parity verdict gates the stage.
    params = make_params("model=onnx", f"model.path={src}", "precision.node_block_list=[sig,stanh]", "target_specs.cpu.precision=fp16")
    p = build(params, tmp_path)
    m = onnx.load(str(p["fp16"]))
    # The converter alone gives y and stateN FLOAT16 (a Cast in front of each output); the stage serves the FP32 values.
    assert {o.name: o.dtype for o in graph_io(m)[1]} == {"y": "float32", "stateN": "float32"}
    assert {o.name: o.dtype for o in graph_io(m)[0]} == {"x": "float32", "state": "float32"}
    report = json.loads((tmp_path / "fp16.json").read_text())
    assert report["io_settled"] == {"y": "identity", "stateN": "identity"}
    producers = {o: n.op_type for n in m.graph.node for o in n.output}
    assert producers["y"] == producers["stateN"] == "Identity"  # of the FP32 Sigmoid/Tanh output: nothing rounded it
    rc, rep = run_parity(params, tmp_path, raw=p["raw"], fp32=p["sim"], fp16=p["fp16"])
    assert rc == 0 and rep["artifacts"]["fp16"]["contract"] == {"passed": True, "problems": []}
    assert rep["reference"]["contract"]["outputs"]["stateN"] == {"dtype": "float32", "rank": 2}
    # The repository serving this FP16 file renders, for both variants, the dtypes the reference takes and returns.
    served = {v: Served("fp16", p["fp16"], "test") for v in ("latency", "throughput")}
    write_repository(load_config(params), served, tmp_path / "repo", parity=tmp_path / "parity.json")
    ref_io = graph_io(onnx.load(str(p["raw"])))
    want = {s.name: s.triton_dtype() for s in ref_io[0] + ref_io[1]}
    assert want == {"x": "TYPE_FP32", "state": "TYPE_FP32", "y": "TYPE_FP32", "stateN": "TYPE_FP32"}
    for variant in ("latency", "throughput"):
        pb = triton_config.parse(tmp_path / "repo" / load_config(params).model.name / "configs" / f"{variant}.pbtxt")
        assert {t.name: triton_config.mc.DataType.Name(t.data_type) for t in [*pb.input, *pb.output]} == want

    # What the converter used to ship: the same graph with a Cast to FLOAT16 in front of an output. Values match
    # (parity's elementwise check passes them); the contract does not.
    bad = onnx.load(str(p["fp16"]))
    for n in bad.graph.node:
        if n.output[0] == "stateN":
            n.output[0] = "stateN_fp32"
    bad.graph.node.append(h.make_node("Cast", ["stateN_fp32"], ["stateN"], to=T.FLOAT16))
    next(o for o in bad.graph.output if o.name == "stateN").type.tensor_type.elem_type = T.FLOAT16
    onnx.save(bad, str(tmp_path / "bad.fp16.onnx"))
    rc, rep = run_parity(params, tmp_path, raw=p["raw"], fp32=p["sim"], fp16=tmp_path / "bad.fp16.onnx")
    out = rep["artifacts"]["fp16"]["outputs"]["stateN"]
    assert rc != 0 and not out["passed"] and out["elementwise_passed"] is False
    assert out["max_abs"] < 1e-2  # the values are fine: only the contract catches it
    assert any("dtype: the artifact returned float16, the reference float32" in x for x in out["problems"])
    assert any("dtype: the artifact declares float16" in x for x in out["problems"])
    report = ParityReport.from_json(rep)
    assert report.verdict("fp16")[0] is False and report.verdict("fp32") == (True, "passed")


def test_keep_io_types_false_promises_fp16_io_and_parity_holds_it(make_params, tmp_path: Path) -> None:
    src = detector(tmp_path / "detector.onnx")
    params = make_params("model=onnx", f"model.path={src}", "precision.node_block_list=[sig,stanh]", "precision.keep_io_types=false")
    p = build(params, tmp_path)
    io = graph_io(onnx.load(str(p["fp16"])))
    assert {s.dtype for s in io[0] + io[1]} == {"float16"}
    rc, rep = run_parity(params, tmp_path, raw=p["raw"], fp32=p["sim"], fp16=p["fp16"])
    assert rep["artifacts"]["fp16"]["contract"]["passed"] is True, rep["artifacts"]["fp16"]
    assert rc == 0


def recognizer(path: Path, flip_every: int = 0, noise: float = 0.0) -> Path:
    """x [batch, 8] -> logits [batch, 20, 12]: an OCR-style recognizer (a class per position). ``flip_every`` > 0 adds a
    bias that changes the predicted class at every flip_every-th position; ``noise`` perturbs the weights slightly."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 20 * 12)).astype(np.float32)
    w += (noise * np.random.default_rng(1).normal(size=w.shape)).astype(np.float32)
    bias = np.zeros((20, 12), np.float32)
    if flip_every:
        bias[::flip_every, 0] = 100.0  # class 0 wins there, whatever the reference said
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "W"], ["flat"]), h.make_node("Reshape", ["flat", "shape"], ["r"]), h.make_node("Add", ["r", "B"], ["logits"])],
        "recognizer",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", 8])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 20, 12])],
        [nh.from_array(w, "W"), nh.from_array(np.array([-1, 20, 12], np.int64), "shape"), nh.from_array(bias, "B")],
    )
    return save_graph(g, path)


def test_a_sequence_classifier_is_judged_per_position(make_params, tmp_path: Path) -> None:
    src = recognizer(tmp_path / "rec.onnx")
    params = make_params("model=onnx", f"model.path={src}", "+model.output_kinds={logits: classifier}", "target_specs.cpu.precision=int8", samples(tmp_path / "x.npz"))
    p = build(params, tmp_path)
    near = recognizer(tmp_path / "near.onnx", noise=1e-3)
    rc, rep = run_parity(params, tmp_path, raw=p["raw"], fp32=p["sim"], fp16=p["fp16"], int8=near)
    q = rep["artifacts"]["int8"]["outputs"]["logits"]["quality"]
    assert rc == 0 and q["metrics"]["top1_agreement"] == 1.0 and q["metrics"]["top1_agreement_rows"] == 1.0 and q["passed"]
    assert q["coverage"]["classes_covered"] > 1 and rep["reference"]["coverage"]["logits"]["classes"] == 12
    # One position in ten predicts another class: per position 0.9 < 0.98 (the flattened row argmax said nothing useful).
    wrong = recognizer(tmp_path / "wrong.onnx", flip_every=10)
    rc, rep = run_parity(params, tmp_path, raw=p["raw"], fp32=p["sim"], fp16=p["fp16"], int8=wrong)
    q = rep["artifacts"]["int8"]["outputs"]["logits"]["quality"]
    assert rc != 0 and set(q["failed"]) == {"top1_agreement"}
    assert q["metrics"]["top1_agreement"] == pytest.approx(0.9, abs=0.02) and q["metrics"]["top1_agreement_rows"] < 0.5
    assert any("top1_agreement=0.9" in line for line in failures(ParityReport.from_json(rep).artifacts))


def constant_classifier(path: Path, shift: float = 0.0) -> Path:
    """x [batch, 8] -> logits [batch, 2] that barely move with x (0.002 across inputs) and always pick class 1, as the
    BERT classifier's held-out rows did; ``shift`` moves the logits as a quantized copy's error would."""
    w = np.full((8, 2), 1e-4, np.float32)
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Add", ["mm", "B"], ["logits"])],
        "classifier",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", 8])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 2])],
        [nh.from_array(w, "W"), nh.from_array(np.array([-1.9 + shift, 2.1 - shift], np.float32), "B")],
    )
    return save_graph(g, path)


def test_a_degenerate_reference_is_named_and_never_passes(make_params, tmp_path: Path) -> None:
    src = constant_classifier(tmp_path / "cls.onnx")
    params = make_params("model=onnx", f"model.path={src}", "+model.output_kinds={logits: classifier}", "target_specs.cpu.precision=int8", samples(tmp_path / "x.npz"))
    p = build(params, tmp_path)
    int8 = constant_classifier(tmp_path / "shifted.onnx", shift=0.006)
    rc, rep = run_parity(params, tmp_path, raw=p["raw"], fp32=p["sim"], fp16=p["fp16"], int8=int8)
    art = rep["artifacts"]["int8"]
    q = art["outputs"]["logits"]["quality"]
    assert q["metrics"]["top1_agreement"] == 1.0 and q["failed"] == {}  # what the old gate called a pass
    assert rc != 0 and art["status"] == "inconclusive" and not art["passed"]
    assert q["coverage"]["classes_covered"] == 1 and len(q["coverage"]["reasons"]) == 2
    assert rep["reference"]["coverage"]["logits"]["classes_covered"] == 1
    lines = failures(ParityReport.from_json(rep).artifacts)
    assert any("predicts class 1 (of 2)" in x and "model.data" in x for x in lines)
    assert any("near-constant" in x for x in lines)
    ok, why = ParityReport.from_json(rep).verdict("int8")
    assert not ok and why.startswith("parity inconclusive")
    # FP32's own error (~1e-7) is far below the spread: its tolerances still judge it; the one class is named, and it
    # passes only because no quality threshold is set for fp32 (the rows cannot judge top-1 there either).
    fp32 = rep["artifacts"]["fp32"]["outputs"]["logits"]
    assert fp32["passed"] and fp32["quality"]["thresholds"] == {}
