"""Move a release between stores as one archive (e.g. into an air-gapped cluster).

``export`` writes ``<model>/<N>/{manifest.json, files/, release.sig}`` into a .tar.gz.
``import`` unpacks with tarfile's ``data`` filter, which refuses entries that would land
outside the target (``../evil``, absolute paths, links pointing out), device files and
setuid bits; then it re-checks every file against the manifest before the release is
published in the store, under the version number its manifest records.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path

from pipeline.core.atomic import atomic_path, file_digest
from pipeline.core.errors import ReleaseError
from pipeline.records.release import ReleaseManifest, read_manifest
from pipeline.release.store import publish
from pipeline.release.store.checksums import Mismatch, compare, raise_on_mismatch
from pipeline.release.store.publish import CLAIM
from pipeline.release.store.store import MODEL_NAME, RELEASE_ENTRIES, ReleaseStore


def export_release(store: ReleaseStore, model: str, version: int, out: str | os.PathLike[str]) -> Path:
    """Verify release ``version`` and write it as a gzip tar at ``out`` (atomically)."""
    store.verify_release(model, version)
    rel = store.release_rel(model, version)
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="release-export-") as tmp:
        local = Path(tmp) / model / str(version)
        store.fs.get_dir(rel, local)
        (local / CLAIM).unlink(missing_ok=True)  # a marker an object store may keep after a killed upload, not content
        with atomic_path(out) as part, tarfile.open(part, "w:gz") as tar:
            tar.add(local.parent, arcname=model)  # entries: <model>/<N>/...
    return out


def unpack(archive: str | os.PathLike[str], dest: Path) -> None:
    """Extract ``archive`` into ``dest`` with the ``data`` filter.

    Raises:
        ReleaseError: an entry is unsafe (named with the reason) or the archive is unreadable.
    """
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except tarfile.FilterError as e:
        member = getattr(getattr(e, "tarinfo", None), "name", "?")
        raise ReleaseError(
            f"refusing to unpack {archive}: unsafe archive entry '{member}'",
            fix="only import archives written by `release export`; this one tries to write outside its directory or holds a special file",
            details={"reason": f"{type(e).__name__}: {e}"},
        ) from None
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ReleaseError(f"cannot read release archive {archive}", fix="check the file is a .tar.gz written by `release export`", details={"error": e}) from None


def import_release(store: ReleaseStore, archive: str | os.PathLike[str]) -> tuple[str, int, str]:
    """Add the release in ``archive`` to the store; returns (model, version, "imported"|"already present")."""
    with tempfile.TemporaryDirectory(prefix="release-import-") as tmp:
        root = Path(tmp)
        unpack(archive, root)
        manifests = sorted(root.glob("*/*/manifest.json"))
        if len(manifests) != 1:
            raise ReleaseError(f"{archive} must hold exactly one release (<model>/<N>/manifest.json), found {len(manifests)}", fix="write it with `release export`")
        rel_dir = manifests[0].parent
        m = read_manifest(manifests[0].read_bytes(), str(manifests[0]))
        model, version = _identity(m, manifests[0])
        if (rel_dir.parent.name, rel_dir.name) != (model, str(version)):
            raise ReleaseError(f"archive layout {rel_dir.parent.name}/{rel_dir.name} does not match its manifest ({model}/{version})", fix="write it with `release export`")
        local = _LocalFS(rel_dir)
        extra = sorted(p.name for p in rel_dir.iterdir() if p.name not in RELEASE_ENTRIES)
        raise_on_mismatch(
            [Mismatch("unexpected", e, "not part of a release") for e in extra] + compare(m.files, local.walk("files"), lambda f: local.sha256(f"files/{f}")),
            f"the release in {archive} does not match its own manifest",
            str(archive),
            "do not import it; export it again from a good store",
        )
        target = store.release_rel(model, version)
        if store.fs.exists(f"{target}/manifest.json"):
            if store.fs.read_bytes(f"{target}/manifest.json") == manifests[0].read_bytes():
                store.verify_release(model, version)
                return model, version, "already present"
            raise ReleaseError(
                f"the store already has a different release {version} of '{model}'",
                fix="release versions are immutable; import into another store, or rebuild",
            )
        uploads = [(f, rel) for f in sorted(rel_dir.rglob("*")) if f.is_file() and (rel := f.relative_to(rel_dir).as_posix()) != "manifest.json"]
        raw = manifests[0].read_bytes()  # the exact bytes: a signature covers them
        publish.write_release(store, model, version, lambda _n: publish.ReleaseFiles(uploads, raw, publish.expected_of(uploads)))
        store.verify_release(model, version)
        return model, version, "imported"


def _identity(m: ReleaseManifest, path: Path) -> tuple[str, int]:
    """The manifest's model and version, checked as ``release build`` names them (one message otherwise).

    (:meth:`ReleaseManifest.from_json` already refused a model that is no string and a version that is no number >= 1.)
    """
    if not MODEL_NAME.match(m.model) or len(m.model.encode()) > 255:
        raise ReleaseError(
            f"the manifest in the archive names model {m.model!r}, which is not a model name a store holds",
            fix="letters, digits, _ . - (not starting with '.'), at most 255 bytes: export the release again from a good store",
            details={"manifest": path.name},
        )
    return m.model, m.version


class _LocalFS:
    """The two reads :func:`pipeline.release.store.checksums.compare` needs, on a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def walk(self, rel: str) -> list[str]:
        base = self.root / rel
        return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()) if base.is_dir() else []

    def sha256(self, rel: str) -> tuple[str, int]:
        return file_digest(self.root / rel)
