"""The real tritonserver validates the configs we ship (strict config, exit on error).

On this CPU machine a valid onnxruntime config fails only because the wheel has no
onnxruntime backend library; a broken config is rejected with Triton's own message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.serving.tritonserver import MISSING_ORT_BACKEND, validate_repository
from tests.tiny_triton import shipped_repository, variant_config


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("valid_repo")
    shipped_repository(root, "tiny")
    return root


@pytest.mark.triton
@pytest.mark.parametrize("variant", ["latency", "throughput"])
def test_valid_variant_fails_only_for_missing_backend(repo: Path, variant: str) -> None:
    res = validate_repository(repo, variant)
    assert res.only_missing_backend, res.log
    assert res.errors == [], res.errors
    assert res.ok
    assert MISSING_ORT_BACKEND in res.log


@pytest.mark.triton
def test_negative_max_batch_size_is_rejected_by_triton(tmp_path: Path) -> None:
    bad = variant_config("tiny", "latency")
    bad.max_batch_size = -1
    shipped_repository(tmp_path, "tiny", configs={"latency": bad})
    res = validate_repository(tmp_path, "latency")
    assert not res.ok
    assert not res.only_missing_backend  # it never got as far as looking for the backend
    assert any("'max_batch_size' must be non-negative value" in ln for ln in res.errors), res.log
