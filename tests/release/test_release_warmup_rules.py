"""Warmup rows in the release store: each release's under <model>/warmup/<N>/ of an environment, named by its config, verified.

Real local stores, no server (tests/release/test_release_warmup.py loads them in a real tritonserver).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import ReleaseError
from pipeline.release.store import pointer
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.promote import promote, rollback
from pipeline.release.verify import verify_store
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import dvc_lock, parity_report, sha256, tiny_repository


def _store(tmp_path: Path, warmups: list[float | None]) -> ReleaseStore:
    """Releases 1..n of the tiny model, release i warming up with a row of value warmups[i-1] (None: no warmup)."""
    store = ReleaseStore(tmp_path / "store")
    parity, lock = parity_report(tmp_path / "parity.json"), dvc_lock(tmp_path / "dvc.lock")
    for i, w in enumerate(warmups, 1):
        build_release(
            store, BuildInputs(tiny_repository(tmp_path / f"repo{i}", marker=f"v{i}", warmup=w), parity, None, lock, git_cwd=tmp_path), unchecked_evidence=True, tag=False
        )
    return store


def _data_files(text: str) -> set[str]:
    cfg = pointer.parse_config(text, "test")
    return {i.input_data_file for s in cfg.model_warmup for i in s.inputs.values()}


def _row(path: Path) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), np.float32)


def test_each_release_warms_from_its_own_rows_in_the_environment(tmp_path: Path) -> None:
    store = _store(tmp_path, [1.0, 2.0])
    env = tmp_path / "store/envs/dev/tiny"
    assert set(store.manifest("tiny", 1).files) >= {"warmup/x", "1/model.py"}  # the release keeps the repository's layout
    promote(store, "dev", version=1)
    assert _data_files((env / "config.pbtxt").read_text()) == {"1/x"}
    assert _row(env / "warmup/1/x").tolist() == [1.0] * 4 and not (env / "warmup/x").exists()
    promote(store, "dev", version=2)
    assert _data_files((env / "config.pbtxt").read_text()) == {"2/x"}
    assert _row(env / "warmup/1/x").tolist() == [1.0] * 4 and _row(env / "warmup/2/x").tolist() == [2.0] * 4  # nothing overwritten
    assert sorted(p.name for p in (env / "warmup").iterdir()) == ["1", "2"]  # no staging name left behind
    assert rollback(store, "dev").copy == "present"
    assert _data_files((env / "config.pbtxt").read_text()) == {"1/x"}
    assert "env dev: live 1, present [1, 2]" in verify_store(store)
    # The release's own configs are untouched: the rewrite is the environment's.
    assert _data_files((tmp_path / "store/releases/tiny/2/files/config.pbtxt").read_text()) == {"x"}


def test_a_release_without_warmup_installs_as_before(tmp_path: Path) -> None:
    store = _store(tmp_path, [None, 2.0])
    env = tmp_path / "store/envs/dev/tiny"
    assert not any(f.startswith("warmup/") for f in store.manifest("tiny", 1).files)
    assert promote(store, "dev", version=1).copy == "copied"
    assert not (env / "warmup").exists() and "model_warmup" not in (env / "config.pbtxt").read_text()
    promote(store, "dev", version=2)
    rollback(store, "dev")
    assert "model_warmup" not in (env / "config.pbtxt").read_text() and sorted(p.name for p in (env / "warmup").iterdir()) == ["2"]
    assert "env dev: live 1, present [1, 2]" in verify_store(store)


def test_verify_hashes_the_warmup_rows_and_promote_rewrites_a_damaged_copy(tmp_path: Path) -> None:
    store = _store(tmp_path, [1.0, 2.0])
    promote(store, "dev", version=1)
    promote(store, "dev", version=2)
    row = tmp_path / "store/envs/dev/tiny/warmup/1/x"
    row.write_bytes(np.full(4, 9.0, np.float32).tobytes())  # same size, other bytes
    with pytest.raises(ReleaseError) as e:
        verify_store(store)
    assert "env dev: copy of version 1 differs from its release: changed: warmup/1/x (sha256" in e.value.render()
    assert rollback(store, "dev").copy == "replaced"  # not live: rewritten from the verified release
    assert _row(row).tolist() == [1.0] * 4 and sha256(row) == store.manifest("tiny", 1).files["warmup/x"].sha256
    verify_store(store)
    # The live copy is never rewritten silently.
    row.write_bytes(b"tampered")
    with pytest.raises(ReleaseError, match="version 1 is live in 'dev' but its files changed"):
        promote(store, "dev", version=1)


def test_an_environment_promoted_before_warmup_copies_is_reported_and_repaired(tmp_path: Path) -> None:
    """What the old install left: the version dir alone, and a pointer naming warmup/x, which Triton cannot open."""
    store = _store(tmp_path, [1.0])
    env = tmp_path / "store/envs/dev/tiny"
    promote(store, "dev", version=1)
    shutil.rmtree(env / "warmup")
    cfg, _ = store.release_config("tiny", 1, None)
    legacy = mc.ModelConfig()
    legacy.CopyFrom(cfg)
    for s in legacy.model_warmup:
        s.inputs["x"].input_data_file = "x"
    (env / "config.pbtxt").write_bytes(pointer.render(legacy, "dev", "tiny", 1, "default"))
    with pytest.raises(ReleaseError) as e:
        verify_store(store)
    text = e.value.render()
    assert "copy of version 1 differs from its release: missing: warmup/1/x" in text and "`release promote --to dev --version 1` adds them" in text
    assert "config.pbtxt's model_warmup names warmup/x, which the environment does not hold, so Triton cannot load it" in text
    res = promote(store, "dev", version=1)
    assert res.action == "promote" and res.copy == "completed" and any("repaired in place" in n for n in res.notes), res
    assert _data_files((env / "config.pbtxt").read_text()) == {"1/x"} and _row(env / "warmup/1/x").tolist() == [1.0] * 4
    verify_store(store)
    assert promote(store, "dev", version=1).action == "noop"
    history = json.loads((tmp_path / "store/history/dev/tiny.json").read_text())
    assert [(h["action"], h["version"]) for h in history] == [("promote", 1), ("promote", 1)]


def test_a_repository_whose_warmup_files_are_missing_is_not_released(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo", warmup=1.0)
    (repo / "tiny/warmup/x").unlink()
    store = ReleaseStore(tmp_path / "store")
    with pytest.raises(ReleaseError, match="has a model_warmup whose data files are not in") as e:
        build_release(
            store, BuildInputs(repo, parity_report(tmp_path / "parity.json"), None, dvc_lock(tmp_path / "dvc.lock"), git_cwd=tmp_path), unchecked_evidence=True, tag=False
        )
    assert "missing: warmup/x" in e.value.render() and store.versions("tiny") == []


def test_the_handover_config_carries_no_warmup() -> None:
    """Triton reloads the old version with the handover config: the new release's rows could fail it."""
    cfg = mc.ModelConfig(name="tiny", max_batch_size=8)
    cfg.model_warmup.add(name="w", batch_size=1, count=1).inputs["x"].CopyFrom(mc.ModelWarmup.Input(data_type=mc.TYPE_FP32, dims=[4], input_data_file="x"))
    cfg.model_warmup.add(name="z", batch_size=1, count=1).inputs["x"].CopyFrom(mc.ModelWarmup.Input(data_type=mc.TYPE_FP32, dims=[4], zero_data=True))
    two = pointer.for_version(cfg, 2)
    assert [s.inputs["x"].input_data_file for s in two.model_warmup] == ["2/x", ""] and two.model_warmup[1].inputs["x"].zero_data
    assert pointer.for_version(two, 3).model_warmup[0].inputs["x"].input_data_file == "3/x"  # idempotent: re-homed, not nested
    assert not pointer.handover(two, "tiny", 1, 2).model_warmup
    assert list(pointer.handover(two, "tiny", 1, 2).version_policy.specific.versions) == [1, 2]
    assert len(pointer.handover(two, "tiny", None, 2).model_warmup) == 2  # nothing served yet: only its own rows run
    assert list(pointer.handover(two, "tiny", 2, 2).version_policy.specific.versions) == [2]  # a repair: one version
