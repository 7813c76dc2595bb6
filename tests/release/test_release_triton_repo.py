"""Each environment of the store is a Triton model repository the real server accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.serving.tritonserver import validate_repository
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.promote import promote, rollback
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import dvc_lock, parity_report
from tests.tiny_triton import shipped_repository


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_environment_is_a_valid_triton_repository(tmp_path: Path) -> None:
    """The shipped onnxruntime config plus our version_policy passes Triton's strict config check.

    On this CPU machine the only error may be the missing onnxruntime backend library.
    """
    store = ReleaseStore(tmp_path / "store")
    lock = dvc_lock(tmp_path / "dvc.lock")
    for i in (1, 2):
        shipped_repository(tmp_path / f"repo{i}")
        parity = parity_report(tmp_path / f"p{i}.json", onnx=tmp_path / f"repo{i}/tiny/1/model.onnx")  # vouches for this ONNX file
        build_release(store, BuildInputs(tmp_path / f"repo{i}", parity, None, lock, git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    promote(store, "production", version=1)
    promote(store, "production", version=2)
    rollback(store, "production")
    result = validate_repository(store.env_repository("production"))
    assert result.ok, "\n".join(result.errors) or result.log[-2000:]
    # Triton read our pointer: it tried to load exactly the live version.
    assert "loading: tiny:1" in result.log and "loading: tiny:2" not in result.log
