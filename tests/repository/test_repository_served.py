"""What the ONNX Runtime model serves per variant, from the choose stage's record: one file, or one per precision
when the variants chose differently; a stale or mismatched record is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core import atomic
from pipeline.records.choice import CandidateFile, PrecisionChoice, VariantChoice
from pipeline.core.config import PipelineConfig
from pipeline.core.errors import RepositoryError
from pipeline.repository import config as triton_config
from pipeline.repository.served import from_choice
from pipeline.repository.writer import write_repository
from tests.tiny_triton import tiny_onnx

TINY16 = ["model.inputs=[{name: x, dtype: float32, shape: [batch, 16]}]", "target_specs.cpu.precision=auto"]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    from tests.helpers.tiny_models import qdq_onnx

    fp32 = tiny_onnx(tmp_path / "onnx" / "model.fp32.onnx")
    return {"fp32": fp32, "int8": qdq_onnx(fp32, tmp_path / "onnx" / "model.int8.onnx")}


def record(tmp_path: Path, files: dict[str, Path], latency: str, throughput: str, target: str = "cpu") -> Path:
    given = {p: CandidateFile(str(f), atomic.file_digest(f)[0]) for p, f in files.items()}
    choice = PrecisionChoice(
        target, "auto", {"latency": VariantChoice(latency, f"auto: {latency} fastest"), "throughput": VariantChoice(throughput, f"auto: {throughput} fastest")}, given
    )
    path = tmp_path / "choose.json"
    path.write_text(json.dumps(choice.to_json()))
    return path


def parity(tmp_path: Path, files: dict[str, Path]) -> Path:
    path = tmp_path / "parity.json"
    arts = {p: {"status": "passed", "passed": True, "sha256": atomic.file_digest(f)[0]} for p, f in files.items()}
    path.write_text(json.dumps({"schema": 1, "passed": True, "artifacts": arts}))
    return path


def test_variants_that_chose_differently_each_load_their_own_file(tiny_cfg, tmp_path: Path, files: dict[str, Path]) -> None:
    cfg: PipelineConfig = tiny_cfg(*TINY16)
    served = from_choice(cfg, record(tmp_path, files, "int8", "fp32"), files)
    out = tmp_path / "repo"
    out.mkdir()
    summary = write_repository(cfg, served, out, parity(tmp_path, files))
    model = out / "tiny"
    assert sorted(p.name for p in (model / "1").iterdir()) == ["model.fp32.onnx", "model.onnx"]
    assert (model / "1" / "model.onnx").read_bytes() == files["int8"].read_bytes()  # the default variant's (latency) precision
    lat, thr = (triton_config.parse(model / "configs" / f"{v}.pbtxt") for v in ("latency", "throughput"))
    assert (lat.default_model_filename, thr.default_model_filename) == ("model.onnx", "model.fp32.onnx")
    assert "Serves fp32 (model.fp32.onnx): auto: fp32 fastest." in (model / "configs" / "throughput.pbtxt").read_text()
    assert {v: s["precision"] for v, s in summary["served"].items()} == {"latency": "int8", "throughput": "fp32"}
    assert set(summary["parity_all"]) == {"int8", "fp32"}


def test_one_precision_is_one_model_onnx(tiny_cfg, tmp_path: Path, files: dict[str, Path]) -> None:
    cfg = tiny_cfg(*TINY16)
    out = tmp_path / "repo"
    out.mkdir()
    write_repository(cfg, from_choice(cfg, record(tmp_path, files, "int8", "int8"), files), out, parity(tmp_path, files))
    assert [p.name for p in (out / "tiny" / "1").iterdir()] == ["model.onnx"]


def test_a_stale_or_mismatched_choice_is_refused(tiny_cfg, tmp_path: Path, files: dict[str, Path]) -> None:
    cfg = tiny_cfg(*TINY16)
    with pytest.raises(RepositoryError, match="was made for target 'a100'"):
        from_choice(cfg, record(tmp_path, files, "int8", "int8", target="a100"), files)
    path = record(tmp_path, files, "int8", "int8")
    other = tiny_onnx(tmp_path / "other" / "model.int8.onnx", seed=1)
    with pytest.raises(RepositoryError, match="was made on another model.int8.onnx"):
        from_choice(cfg, path, {**files, "int8": other})
    with pytest.raises(RepositoryError, match="no int8 ONNX was given"):
        from_choice(cfg, path, {"fp32": files["fp32"]})
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(RepositoryError, match="not a precision choice"):
        from_choice(cfg, tmp_path / "bad.json", files)
