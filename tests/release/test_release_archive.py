"""Exporting and importing releases as archives; unsafe archives are refused by tarfile's data filter."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from pipeline.core.errors import ReleaseError
from pipeline.release.archive import export_release, import_release
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import release_tiny


@pytest.fixture
def store(tmp_path: Path) -> ReleaseStore:
    st = ReleaseStore(tmp_path / "store")
    release_tiny(st, tmp_path)
    return st


def _rewrite(src: Path, dst: Path, change: dict[str, bytes | None]) -> Path:
    """Copy a tar.gz, replacing (bytes) or adding entries named in ``change``."""
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isfile() else None
            if m.name in change:
                data = change.pop(m.name)
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
        for name, data in change.items():
            info = tarfile.TarInfo(name)
            info.size = len(data or b"")
            tout.addfile(info, io.BytesIO(data or b""))
    return dst


def _refused(archive: Path, change: dict[str, bytes | None], match: str) -> str:
    """Import ``archive`` with ``change`` made to it (``bad.tar.gz`` beside it) into a new store ``other`` beside it:
    refused with ``match``; the error as rendered."""
    bad = _rewrite(archive, archive.with_name("bad.tar.gz"), change)
    with pytest.raises(ReleaseError, match=match) as e:
        import_release(ReleaseStore(archive.parent / "other"), bad)
    return e.value.render()


def test_export_import_roundtrip(tmp_path: Path, store: ReleaseStore) -> None:
    archive = export_release(store, "tiny", 1, tmp_path / "tiny-1.tar.gz")
    other = ReleaseStore(tmp_path / "other")
    assert import_release(other, archive) == ("tiny", 1, "imported")
    assert other.verify_release("tiny", 1).files == store.manifest("tiny", 1).files
    assert import_release(other, archive) == ("tiny", 1, "already present")


def test_archive_entry_escaping_the_target_is_refused(tmp_path: Path, store: ReleaseStore) -> None:
    archive = export_release(store, "tiny", 1, tmp_path / "tiny-1.tar.gz")
    assert "OutsideDestinationError" in _refused(archive, {"../evil": b"pwned"}, "unsafe archive entry '../evil'")
    assert not (tmp_path / "other").exists()
    assert not list(tmp_path.rglob("evil")) and not Path("/tmp/evil").exists()


def test_archive_with_changed_file_is_refused(tmp_path: Path, store: ReleaseStore) -> None:
    archive = export_release(store, "tiny", 1, tmp_path / "tiny-1.tar.gz")
    assert "changed: 1/model.py" in _refused(archive, {"tiny/1/files/1/model.py": b"import os\n"}, "does not match its own manifest")
    _refused(archive, {"tiny/1/files/1/backdoor.py": b"x"}, "unexpected: 1/backdoor.py")


def test_import_refuses_a_different_release_with_the_same_number(tmp_path: Path, store: ReleaseStore) -> None:
    archive = export_release(store, "tiny", 1, tmp_path / "tiny-1.tar.gz")
    other = ReleaseStore(tmp_path / "other")
    release_tiny(other, tmp_path, "repo2", marker="x")
    with pytest.raises(ReleaseError, match="already has a different release 1"):
        import_release(other, archive)


def test_not_an_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    with pytest.raises(ReleaseError, match="cannot read release archive"):
        import_release(ReleaseStore(tmp_path / "s"), junk)
