"""Real-world model shapes (issue 28, item 5), each built in the test as a tiny structural twin, from ``model=onnx``
through every model stage to a repository a strict tritonserver accepts, with at most a line or two of config.

| family | what breaks a naive pipeline | config it needs |
|---|---|---|
| voice detector: ``If`` + rank-0 ``sr`` | FP16 through the branch (kept FP32 automatically); rank 0 in calibration | none |
| ...with its recurrent state ``[2, N, 4]`` | the batch on axis 1 of the state (samples gave it 16 rows) | none |
| detector: dynamic H, W in strides of 32 | 16 x 16 samples fail to broadcast | ``++model.sample_dims.H=32 ++model.sample_dims.W=32`` |
| OCR net exported at opset 12 | per-channel INT8 writes an opset-13 attribute | none |
| BERT-style, three int64 inputs | random ids beyond the embedding tables | none (ranges read from the Gather tables) |
| fixed batch of 4 | no batch axis: max_batch_size 0 | none |
| saved with external data (``.onnx`` + ``.onnx.data``) | a copy of the ``.onnx`` alone has no weights | none (export inlines the data: one file from then on) |
| JAX-exported classifier, int32 ids | FP16 ``Add`` of FLOAT16 and a ``value_float`` Constant (ORT refuses it; kept FP32 automatically) | none |
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pipeline.core import optional
from pipeline.repository import config as triton_config
from pipeline.serving.tritonserver import validate_repository
from pipeline.stages import calibrate, choose, export, fp16, int8, parity, repository, simplify
from tests.helpers import corpus

pytestmark = pytest.mark.triton  # a strict tritonserver validates each repository

FAMILIES: dict[str, tuple[Callable[[Path], Path], list[str]]] = {
    "vad": (corpus.if_onnx, []),
    "vad_state": (corpus.vad_state_onnx, []),
    "detector": (corpus.stride32_onnx, ["++model.sample_dims.H=32", "++model.sample_dims.W=32"]),
    "ocr": (corpus.conv_opset12_onnx, []),
    "bert": (corpus.bert_like_onnx, []),
    "fixed": (corpus.fixed_batch_onnx, []),
    "jax_cls": (corpus.jax_int32_onnx, []),
    "external": (corpus.external_data_onnx, []),
}


def chain(params: Path, d: Path) -> dict[str, int]:
    """Every model stage, as dvc.yaml runs them; the exit code of each."""
    p, a = ["--params", str(params)], lambda name: str(d / name)
    onnx_files = ["--fp32", a("model.fp32.onnx"), "--fp16", a("model.fp16.onnx"), "--int8", a("model.int8.onnx")]
    (d / "engines").mkdir(exist_ok=True)
    steps: list[tuple[str, Callable[[list[str]], int], list[str]]] = [
        ("export", export.main, [*p, "--out", a("model.onnx"), "--report", a("export.json")]),
        ("simplify", simplify.main, [*p, "--onnx", a("model.onnx"), "--out", a("model.fp32.onnx"), "--report", a("simplify.json")]),
        ("fp16", fp16.main, [*p, "--onnx", a("model.fp32.onnx"), "--out", a("model.fp16.onnx"), "--report", a("fp16.json")]),
        ("calibrate", calibrate.main, [*p, "--onnx", a("model.fp32.onnx"), "--out", a("samples.json"), "--report", a("calibrate.json")]),
        ("int8", int8.main, [*p, "--onnx", a("model.fp32.onnx"), "--calibration", a("samples.json"), "--out", a("model.int8.onnx"), "--report", a("int8.json")]),
        (
            "parity",
            parity.main,
            [*p, "--source-onnx", a("model.onnx"), *onnx_files, "--engines", a("engines"), "--inputs", a("in.json"), "--reference", a("ref.json"), "--report", a("parity.json")],
        ),
        ("choose", choose.main, [*p, *onnx_files, "--parity", a("parity.json"), "--report", a("choose.json")]),
        (
            "repository",
            repository.main,
            [*p, *onnx_files, "--choice", a("choose.json"), "--parity", a("parity.json"), "--engines", a("engines"), "--out", a("repo"), "--report", a("repository.json")],
        ),
    ]
    codes = {}
    for name, main, args in steps:
        codes[name] = main(args)
        if codes[name] != 0:
            break
    return codes


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_reaches_a_repository_a_strict_tritonserver_accepts(family: str, make_params, tmp_path: Path) -> None:
    build, extra = FAMILIES[family]
    src = build(tmp_path / f"{family}.onnx")
    params = make_params("model=onnx", f"model.name={family}", f"model.path={src}", *extra)
    codes = chain(params, tmp_path)
    assert set(codes.values()) == {0} and len(codes) == 8, codes
    rep = json.loads((tmp_path / "parity.json").read_text())
    assert rep["passed"] is True and rep["artifacts"]["fp32"]["status"] == "passed"
    # Optional precisions: built here, or recorded with their reason; never fatal.
    for kind in ("fp16", "int8"):
        why = optional.reason(tmp_path / f"model.{kind}.onnx")
        assert why is None or rep["artifacts"][kind]["reason"] == f"not available: {why}", (kind, why)
    for variant in ("latency", "throughput"):
        checked = validate_repository(tmp_path / "repo", variant)
        assert checked.only_missing_backend and not checked.errors, checked.log
    if family == "fixed":  # no batch axis: Triton gets max_batch_size 0 and no batcher, the note says why
        cfg = triton_config.parse(tmp_path / "repo/fixed/configs/throughput.pbtxt")
        assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    if family == "bert":  # synthetic ids span each embedding table (read from its Gather), masks are 0/1
        from polygraphy.json import load_json

        feeds = load_json(str(tmp_path / "in.json"))
        ids, types, mask = (np.concatenate([f[k].ravel() for f in feeds]) for k in ("input_ids", "token_type_ids", "attention_mask"))
        assert 0 <= ids.min() and ids.max() < 64 and ids.max() > 32, (ids.min(), ids.max())
        assert set(types.tolist()) == {0, 1} and set(mask.tolist()) == {0, 1}
    if family == "jax_cls":  # int32 ids span the embedding table (read from its Gather), as int32
        from polygraphy.json import load_json

        ids = np.concatenate([f["ids"].ravel() for f in load_json(str(tmp_path / "in.json"))])
        assert ids.dtype == np.int32 and 0 <= ids.min() and 32 < ids.max() < 64, (ids.dtype, ids.min(), ids.max())
    if family == "jax_cls" and optional.reason(tmp_path / "model.fp16.onnx") is None:  # ORT refused the converted Add
        fp16_rep = json.loads((tmp_path / "fp16.json").read_text())
        assert [r["node"] for r in fp16_rep["ort_rejected"]] == ["add_bias"], fp16_rep["ort_rejected"]
        assert "bound to different types" in fp16_rep["ort_rejected"][0]["error"]
        kept = {k["node"]: k["reason"] for k in fp16_rep["kept_fp32"]}
        assert kept["add_bias"].startswith("fallback (ONNX Runtime refused the FP16 graph)"), kept
        assert fp16_rep["fallback"]["attempts"][-1]["cross_check"]["status"] == "ok"  # it evaluated the graph shipped
    if family == "external":  # the data was inlined at export: every artifact and the repository hold one file each
        from pipeline.core.onnx_tools import external_data_files

        assert json.loads((tmp_path / "export.json").read_text())["external_data"]["files"] == ["external.onnx.data"]
        assert not external_data_files(tmp_path / "model.onnx") and not external_data_files(tmp_path / "model.fp32.onnx")
        assert sorted(p.name for p in (tmp_path / "repo/external/1").iterdir()) == ["model.onnx"]
