"""Release build, promote, rollback and verify on real stores (local paths and fsspec memory://)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.core.errors import ReleaseError
from pipeline.release.store import pointer
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.promote import promote, rollback
from pipeline.release.verify import verify_store
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import ONNX_BYTES, bench_report, dvc_lock, parity_report, pointer_reads_while_flipping, sha256, tiny_repository


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """Two repositories whose model.py differ (same model.onnx and configs), a passing parity report, a dvc.lock, a bench report."""
    repo1 = tiny_repository(tmp_path / "repo1")
    return {
        "repo1": repo1,
        "repo2": tiny_repository(tmp_path / "repo2", marker="two"),
        "parity": parity_report(tmp_path / "parity.json"),
        "lock": dvc_lock(tmp_path / "dvc.lock"),
        "bench": bench_report(tmp_path / "bench.json", repo1 / "tiny"),
        "cwd": tmp_path,
    }


def _build(store: ReleaseStore, inputs: dict[str, Path], repo: str = "repo1") -> int:
    return build_release(store, BuildInputs(inputs[repo], inputs["parity"], inputs["bench"], inputs["lock"], git_cwd=inputs["cwd"]), unchecked_evidence=True, tag=False).version


def test_build_records_everything_and_numbers_versions(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    assert _build(store, inputs) == 1
    assert _build(store, inputs, "repo2") == 2
    m = store.manifest("tiny", 2).to_json()  # the manifest as the store holds it
    # The source's version dir "1" is renumbered to the release version.
    assert set(m["files"]) == {"config.pbtxt", "configs/latency.pbtxt", "configs/throughput.pbtxt", "2/model.py", "2/model.onnx", "2/sys_path.json"}
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in m["files"].values())
    assert m["dvc_lock"]["repository"]["deps"]["artifacts/onnx/model.sim.onnx"] == "0123456789abcdef0123456789abcdef"
    assert m["parity"]["pass"] is True and m["parity"]["artifacts"]["fp32"]["pass"] is True
    assert m["parity"]["artifacts"]["fp16"]["outputs"]["y"]["max_abs"] == 1e-7
    # Summaries with the shas they vouch for, never whole reports.
    assert m["parity"]["served"] == {"model.onnx": {"sha256": sha256(ONNX_BYTES), "artifact": "fp32"}}
    assert m["parity"]["artifacts"]["fp32"] == {"pass": True, "status": "passed", "sha256": sha256(ONNX_BYTES), "outputs": {"y": {"max_abs": 1e-7, "atol": 1e-4}}}
    assert m["files"]["2/model.onnx"]["sha256"] == sha256(ONNX_BYTES)
    assert m["bench"]["status"] == "measured" and m["bench"]["summary"] == {"latency_p50_ms": 1.5}
    assert m["bench"]["model_sha256"] == sha256(ONNX_BYTES) and set(m["bench"]["configs_sha256"]) == {"latency", "throughput"}
    assert "variants" not in m["bench"]  # the report's bulk stays out of the manifest
    # Built from a directory outside any DVC project: said so, not silently skipped.
    assert m["dvc"]["checked"] is False and "not inside a DVC project" in m["dvc"]["reason"]
    assert m["environment"]["python"] and "dvc" in m["environment"]["packages"]
    assert m["git"]["commit"] is None  # tmp_path is not a git repository
    assert (tmp_path / "store/releases/tiny/2/files/2/model.py").read_text().endswith("# two\n")


def test_promote_rollback_flip_pointer_and_keep_newer_release(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    _build(store, inputs, "repo2")
    r = promote(store, "dev", version=1)
    assert (r.action, r.previous, r.version, r.copy) == ("promote", None, 1, "copied")
    r = promote(store, "dev")  # default for the first env: newest release
    assert (r.previous, r.version) == (1, 2)
    cfg_path = tmp_path / "store/envs/dev/tiny/config.pbtxt"
    cfg = pointer.parse_config(cfg_path.read_text(), "x")
    assert pointer.live_versions(cfg) == [2] and cfg.name == "tiny" and cfg.backend == "python"
    # The next environment takes what is live in the previous one.
    assert promote(store, "staging").version == 2

    r = rollback(store, "dev")
    assert (r.action, r.previous, r.version) == ("rollback", 2, 1)
    assert store.env_state("dev", "tiny").live == 1
    # Rollback deleted nothing: the newer version is still installed and still a release.
    assert (tmp_path / "store/envs/dev/tiny/2/model.py").is_file()
    assert store.versions("tiny") == [1, 2]
    assert store.verify_release("tiny", 2)
    with pytest.raises(ReleaseError, match="no earlier release to roll back to in 'dev'") as e:
        rollback(store, "dev")
    assert "release promote --to dev --version" in e.value.render()
    # Re-promoting the kept version reuses its verified copy.
    assert promote(store, "dev", version=2).copy == "present"
    assert verify_store(store)


def test_promote_missing_version_names_existing_ones(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    with pytest.raises(ReleaseError, match="release version 7 of 'tiny' does not exist") as e:
        promote(store, "dev", version=7)
    assert "[1]" in e.value.render()
    assert not (tmp_path / "store/envs").exists()


def test_rollback_with_nothing_promoted(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    with pytest.raises(ReleaseError, match="nothing has been promoted to 'production' yet"):
        rollback(store, "production")


def test_unknown_environment(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    with pytest.raises(ReleaseError, match="unknown environment 'prod'") as e:
        promote(store, "prod")
    assert "production" in e.value.render()


@pytest.mark.parametrize("case", ["flipped byte", "added file", "removed file"])
def test_promote_refuses_a_modified_release(tmp_path: Path, inputs: dict[str, Path], case: str) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    files = tmp_path / "store/releases/tiny/1/files"
    if case == "flipped byte":
        data = bytearray((files / "1/model.py").read_bytes())
        data[10] ^= 0x01
        (files / "1/model.py").write_bytes(bytes(data))
        expect = "changed: 1/model.py"
    elif case == "added file":
        (files / "1/extra.bin").write_bytes(b"x")
        expect = "unexpected: 1/extra.bin"
    else:
        (files / "configs/throughput.pbtxt").unlink()
        expect = "missing: configs/throughput.pbtxt"
    with pytest.raises(ReleaseError, match="was modified after it was built") as e:
        promote(store, "dev", version=1)
    assert expect in e.value.render()
    assert not (tmp_path / "store/envs/dev/tiny/config.pbtxt").exists()  # no flip
    with pytest.raises(ReleaseError, match="failed verification"):
        verify_store(store)


def test_damaged_copy_in_environment(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    _build(store, inputs, "repo2")
    promote(store, "dev", version=1)
    promote(store, "dev", version=2)
    (tmp_path / "store/envs/dev/tiny/1/model.py").write_text("tampered")
    with pytest.raises(ReleaseError, match="copy of version 1 differs"):
        verify_store(store)
    # A non-live damaged copy is rewritten from the verified release before the flip.
    assert rollback(store, "dev").copy == "replaced"
    assert verify_store(store)
    # A damaged *live* copy is refused, never silently served.
    (tmp_path / "store/envs/dev/tiny/1/model.py").write_text("tampered again")
    with pytest.raises(ReleaseError, match="is live in 'dev' but its files changed"):
        promote(store, "dev", version=1)


def test_parity_missing_or_failed_refuses_build(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    with pytest.raises(ReleaseError, match="parity report not found") as e:
        build_release(store, BuildInputs(inputs["repo1"], tmp_path / "nope.json", None, inputs["lock"], git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    assert "dvc repro parity" in e.value.render()
    failed = parity_report(tmp_path / "failed.json", failed=("fp32",))  # fp32 is the served model.onnx
    with pytest.raises(ReleaseError, match="parity failed for a file this release ships") as e:
        build_release(store, BuildInputs(inputs["repo1"], failed, None, inputs["lock"], git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    assert "model.onnx is the fp32 artifact, and it did not pass: parity failed for outputs ['y']" in e.value.render()
    # The parity stage's one reader (pipeline.records.parity.read_report) decides what a report is:
    # shapes the stage never writes (no schema, a bare top-level "pass", a list of artifacts) are refused.
    for name, body in (("noverdict", {"artifacts": {}}), ("minimal", {"pass": True, "artifacts": [{"name": "fp32", "pass": True}]})):
        (tmp_path / f"{name}.json").write_text(json.dumps(body))
        with pytest.raises(ReleaseError, match="unknown format") as e:
            build_release(store, BuildInputs(inputs["repo1"], tmp_path / f"{name}.json", None, inputs["lock"], git_cwd=tmp_path), unchecked_evidence=True, tag=False)
        assert "rerun the parity stage" in e.value.render()
    assert not (tmp_path / "store").exists()


def test_parity_skipped_artifact_does_not_block(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    p = parity_report(tmp_path / "skip.json", skipped=("trt@a100",))
    r = build_release(store, BuildInputs(inputs["repo1"], p, None, inputs["lock"], git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    assert r.manifest.to_json()["parity"]["artifacts"]["trt@a100"] == {"pass": None, "status": "skipped"}
    assert r.manifest.to_json()["parity"]["not_shipped"] == {"trt@a100": "parity skipped: no GPU"}


def test_a_failed_artifact_the_release_does_not_ship_is_recorded_not_fatal(tmp_path: Path, inputs: dict[str, Path]) -> None:
    """Issue 28, finding 1: int8 failed its gate on an fp32 fleet; the release of the fp32 model that passed is built."""
    store = ReleaseStore(tmp_path / "store")
    p = parity_report(tmp_path / "int8.json", failed=("fp16",))  # not in the repository: it serves fp32 only
    m = build_release(store, BuildInputs(inputs["repo1"], p, None, inputs["lock"], git_cwd=tmp_path), unchecked_evidence=True, tag=False).manifest.to_json()
    assert m["parity"]["served"]["model.onnx"]["artifact"] == "fp32"
    assert m["parity"]["not_shipped"] == {"fp16": "parity failed for outputs ['y']"}
    assert m["parity"]["artifacts"]["fp16"]["pass"] is False


def test_store_not_writable(tmp_path: Path, inputs: dict[str, Path]) -> None:
    # Tests run as root, so permission bits would not stop a write: use paths no one can
    # create directories in - below a regular file, and inside /proc.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for url in (blocker / "store", Path("/proc") / f"release-store-{uuid.uuid4().hex}"):
        with pytest.raises(ReleaseError, match="the release store is not writable") as e:
            _build(ReleaseStore(url), inputs)
        assert "--store" in e.value.render()
    # A store whose releases are readable but whose environments cannot be written.
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    (tmp_path / "store/envs").write_text("a file where the environments should be")
    with pytest.raises(ReleaseError, match="the release store is not writable"):
        promote(store, "dev", version=1)


def test_memory_url_store_works_the_same(inputs: dict[str, Path]) -> None:
    """Any fsspec URL: memory:// exercises the non-local code paths (PUT instead of os.replace)."""
    store = ReleaseStore(f"memory://release-test-{uuid.uuid4().hex}")
    assert not store.fs.local
    assert _build(store, inputs) == 1 and _build(store, inputs, "repo2") == 2
    promote(store, "dev", version=1)
    promote(store, "dev", version=2)
    assert rollback(store, "dev").version == 1
    assert store.env_state("dev", "tiny").present == [1, 2]
    assert verify_store(store)
    store.fs.fs.pipe_file(store.fs.path("releases/tiny/2/files/2/model.py"), b"tampered")
    with pytest.raises(ReleaseError, match="changed: 2/model.py"):
        promote(store, "dev", version=2)


def test_readers_never_see_a_partial_pointer(tmp_path: Path, inputs: dict[str, Path]) -> None:
    """While the pointer flips back and forth, every read parses and names exactly one version."""
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    _build(store, inputs, "repo2")
    promote(store, "dev", version=1)
    cfg_path = tmp_path / "store/envs/dev/tiny/config.pbtxt"
    seen, errors = pointer_reads_while_flipping(store, cfg_path.read_text, 15, (ReleaseError, OSError))  # a torn or missing file
    assert not errors
    assert seen <= {(1,), (2,)} and seen


def test_variant_choice_is_served_and_survives_rollback(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    _build(store, inputs, "repo2")
    promote(store, "dev", version=1, variant="throughput")
    promote(store, "dev", version=2)
    rollback(store, "dev")
    cfg = pointer.parse_config((tmp_path / "store/envs/dev/tiny/config.pbtxt").read_text(), "x")
    assert cfg.HasField("dynamic_batching") and pointer.live_versions(cfg) == [1]
    with pytest.raises(ReleaseError, match="no config variant 'fast'"):
        promote(store, "dev", version=2, variant="fast")


def test_unreachable_triton_changes_nothing(tmp_path: Path, inputs: dict[str, Path]) -> None:
    from pipeline.serving.process import free_port

    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    _build(store, inputs, "repo2")
    promote(store, "dev", version=1)
    with pytest.raises(ReleaseError, match="cannot reach Triton") as e:
        promote(store, "dev", version=2, reload_url=f"http://127.0.0.1:{free_port()}")
    assert "--model-control-mode=explicit" in e.value.render()
    assert store.env_state("dev", "tiny").live == 1
    assert [h["version"] for h in store.env_state("dev", "tiny").history] == [1]


def test_concurrent_switch_of_one_environment_is_refused(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = ReleaseStore(tmp_path / "store")
    _build(store, inputs)
    with store.env_lock("dev", "tiny"):
        with pytest.raises(ReleaseError, match="another promote or rollback of 'tiny' in 'dev' is running"):
            promote(store, "dev", version=1)
    assert promote(store, "dev", version=1).version == 1


def test_build_refuses_a_config_triton_cannot_parse(tmp_path: Path, inputs: dict[str, Path]) -> None:
    (inputs["repo1"] / "tiny/configs/throughput.pbtxt").write_text("max_batch_size: eight\n")
    with pytest.raises(ReleaseError, match="cannot parse Triton config .*throughput.pbtxt") as e:
        _build(ReleaseStore(tmp_path / "store"), inputs)
    assert "dvc repro repository" in e.value.render()
    assert not (tmp_path / "store").exists()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users may enter (pytest's tmp_path is under a 700 directory)."""
    d = Path(tempfile.mkdtemp(prefix="release-shared-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _promote_everything(store: ReleaseStore, inputs: dict[str, Path]) -> None:
    _build(store, inputs)
    _build(store, inputs, "repo2")
    promote(store, "dev", version=1)
    promote(store, "dev", version=2)
    rollback(store, "dev")


def test_store_files_get_the_modes_the_umask_says(shared_dir: Path, inputs: dict[str, Path]) -> None:
    """Finding 5: config.pbtxt, manifest.json and history/*.json were 600 whatever the umask (mkstemp)."""
    for umask in (0o022, 0o027, 0o077):
        root = shared_dir / f"umask-{umask:03o}"
        old = os.umask(umask)
        try:
            _promote_everything(ReleaseStore(root / "store"), inputs)
        finally:
            os.umask(old)
        modes = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in (root / "store").rglob("*")}
        assert {"store/envs/dev/tiny/config.pbtxt", "store/releases/tiny/2/manifest.json", "store/history/dev/tiny.json", "store/envs/dev/tiny/2/model.onnx"} <= set(modes)
        want = {p: (0o777 if (root / p).is_dir() else 0o666) & ~umask for p in modes}
        assert {p: oct(m) for p, m in modes.items()} == {p: oct(m) for p, m in want.items()}, f"umask {umask:03o}"


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root to switch to 'nobody'")
def test_store_is_readable_by_another_user(shared_dir: Path, inputs: dict[str, Path]) -> None:
    """What a Triton server or an operator running as another user reads, read as 'nobody' (umask 022)."""
    old = os.umask(0o022)
    try:
        store = ReleaseStore(shared_dir / "store")
        _promote_everything(store, inputs)
    finally:
        os.umask(old)
    s = shared_dir / "store"
    triton = [s / "envs/dev/tiny/config.pbtxt", *sorted((s / "envs/dev/tiny/1").iterdir()), *sorted((s / "envs/dev/tiny/2").iterdir())]
    records = [s / "releases/tiny/1/manifest.json", s / "history/dev/tiny.json"]
    r = subprocess.run(["cat", *map(str, triton + records)], user="nobody", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "versions: 1" in r.stdout  # the pointer Triton reads
    r = subprocess.run(["ls", str(s / "envs/dev/tiny"), str(s / "releases/tiny/2/files")], user="nobody", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
