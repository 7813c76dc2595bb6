"""The real tritonserver validates what the repository stage emits (strict config, exit on error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from pipeline.repository import config as triton_config
from pipeline.serving.tritonserver import validate_repository
from pipeline.convert import export, fp16, simplify
from pipeline.repository import writer as repository

pytestmark = pytest.mark.triton


@pytest.fixture
def emitted(tiny_cfg, tmp_path: Path) -> Path:
    """A repository written by the repository stage for the tiny model."""
    cfg = tiny_cfg()
    raw, sim, half = (tmp_path / n for n in ("m.onnx", "m.sim.onnx", "m.fp16.onnx"))
    export.run_export(cfg.model, cfg.export, raw)
    simplify.simplify(raw, sim, cfg.simplify, cfg.model)
    fp16.run_fp16(sim, half, cfg.precision, cfg.model)
    repo = tmp_path / "repo"
    repo.mkdir()
    repository.write_repository(cfg, sim, repo)
    return repo


@pytest.mark.parametrize("variant", ["latency", "throughput", None])
def test_triton_accepts_every_variant(emitted: Path, variant: str | None) -> None:
    res = validate_repository(emitted, variant)
    assert res.ok, f"Triton rejected the {variant or 'default'} config:\n" + "\n".join(res.errors or res.log.splitlines()[-15:])


def test_triton_rejects_broken_config(emitted: Path) -> None:
    path = emitted / "tiny" / "configs" / "latency.pbtxt"
    cfg = triton_config.parse(path)
    cfg.max_batch_size = -1
    path.write_text(text_format.MessageToString(cfg))
    res = validate_repository(emitted, "latency")
    assert not res.ok
    assert any("max_batch_size" in e and "non-negative" in e for e in res.errors), res.errors


def test_triton_accepts_the_derived_fixed_batch_configs(make_params, tmp_path: Path) -> None:
    """A fixed-batch graph's derived configs (max_batch_size 0, no batching) pass Triton's strict validation."""
    from pipeline.core.config import load_config
    from tests.helpers.tiny_models import two_io_onnx

    model = two_io_onnx(str(tmp_path / "fixed.onnx"), batch=1)
    cfg = load_config(make_params("model=onnx", "model.name=fixed", f"model.path={model}"))
    repo = tmp_path / "repo"
    repo.mkdir()
    repository.write_repository(cfg, Path(model), repo)
    for variant in ("latency", "throughput"):
        res = validate_repository(repo, variant)
        assert res.ok, "\n".join(res.errors or res.log.splitlines()[-15:])
