"""model_warmup rendered from Triton's schema, fed a real sample row written under <model>/warmup/."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.repository import config as triton_config
from pipeline.repository import writer as repository
from pipeline.repository.warmup import WARMUP_DIR
from tests.helpers.tiny_models import mlp_samples


def _write(tiny_cfg, tiny_onnx: Path, tmp_path: Path, *extra: str) -> Path:
    cfg = tiny_cfg("+model.data={_target_: tests.helpers.tiny_models.mlp_samples}", *extra)
    repo = tmp_path / "repo"
    repo.mkdir()
    repository.write_repository(cfg, tiny_onnx, repo)
    return repo / cfg.model.name


def test_every_variant_warms_up_on_a_real_sample_row(tiny_cfg, tiny_onnx: Path, tmp_path: Path) -> None:
    model = _write(tiny_cfg, tiny_onnx, tmp_path, "variants.throughput.max_batch_size=16", "variants.throughput.warmup.batch_sizes=[1,4,16]", "variants.throughput.warmup.count=2")
    thr = triton_config.parse(model / "configs" / "throughput.pbtxt")
    assert [(w.name, w.batch_size, w.count) for w in thr.model_warmup] == [("sample_batch_1", 1, 2), ("sample_batch_4", 4, 2), ("sample_batch_16", 16, 2)]
    x = thr.model_warmup[0].inputs["x"]
    assert x.data_type == mc.TYPE_FP32 and list(x.dims) == [8] and x.input_data_file == "x" and not x.zero_data
    # The file is the first sample row's bytes (no batch axis): a request a client sends, not zeros.
    row = mlp_samples()[0]["x"][0]
    assert np.array_equal(np.frombuffer((model / WARMUP_DIR / "x").read_bytes(), dtype=np.float32), row)
    lat = triton_config.parse(model / "configs" / "latency.pbtxt")
    assert [w.batch_size for w in lat.model_warmup] == [1]
    assert "model_warmup: one real sample row" in (model / "configs" / "latency.pbtxt").read_text()


def test_no_warmup_renders_none_and_says_so(tiny_cfg, tiny_onnx: Path, tmp_path: Path) -> None:
    model = _write(tiny_cfg, tiny_onnx, tmp_path, "variants.latency.warmup=null", "variants.throughput.warmup=null")
    text = (model / "configs" / "latency.pbtxt").read_text()
    assert not triton_config.parse(model / "configs" / "latency.pbtxt").model_warmup and "No model_warmup" in text
    assert not (model / WARMUP_DIR).exists()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("variants.latency.warmup.batch_sizes=[1,32]", "variants.latency.warmup.batch_sizes"),
        ("variants.latency.warmup.batch_sizes=[1,1]", "variants.latency.warmup.batch_sizes"),
        ("variants.throughput.warmup.count=0", "variants.throughput.warmup.count"),
    ],
)
def test_warmup_values_are_checked_at_composition(tiny_cfg, override: str, key: str) -> None:
    from pipeline.core.config import ConfigProblems

    with pytest.raises(ConfigProblems) as e:
        tiny_cfg(override)
    assert [p.key for p in e.value.problems] == [key]
