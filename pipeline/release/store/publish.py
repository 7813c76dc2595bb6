"""Writing one release into the store so that a reader sees all of it or none of it.

Local stores: upload under a staging name (``releases/<model>/.staging-<N>-<id>/``, which version
listing and Triton ignore), re-hash every file in the store, write the manifest, then one rename.

Object stores have no rename (a copy of N objects is N writes a reader sees one by one), so the
*manifest* is the commit:

1. claim the number: create ``releases/<model>/<N>/.claim`` with ``If-None-Match: *`` (a
   :class:`~pipeline.release.store.lock.Lease` without takeover); of two builders only one gets N,
   the other moves on to N+1. The claim is renewed by a heartbeat while the upload runs.
2. upload every file into ``releases/<model>/<N>/`` (``files/``, ``release.sig``), then re-read
   each one from the store and compare its sha256 with the source's;
3. renew the claim (proof we still own N), then create ``manifest.json`` with ``If-None-Match``:
   this single PUT makes N a release. :meth:`ReleaseStore.versions` counts only versions whose
   manifest exists, and promote/export re-hash every file against it before using it;
4. delete the claim.

A process killed before step 3 leaves files and a claim but no manifest: never a release. The
next build of that model removes such leftovers once their claim is older than the lease
(:func:`collect_unfinished`), and ``release verify`` lists them meanwhile.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline.core.atomic import file_digest
from pipeline.core.errors import ReleaseError
from pipeline.records.release import FileEntry, FileTable
from pipeline.release.store.checksums import compare, raise_on_mismatch
from pipeline.release.store.fs import StoreFS
from pipeline.release.store.lock import Busy, Lease
from pipeline.release.store.s3 import Conflict


class ReleaseStore(Protocol):
    """What this module needs of :class:`pipeline.release.store.store.ReleaseStore` (which imports this module)."""

    fs: StoreFS
    lock_lease_s: float

    def release_rel(self, model: str, version: int) -> str: ...

    def versions(self, model: str) -> list[int]: ...


CLAIM = ".claim"
_MAX_CLAIM_TRIES = 20


@dataclass
class ReleaseFiles:
    """What one release consists of, ready to upload."""

    uploads: list[tuple[Path, str]]  # (local file, path inside the release dir: files/..., release.sig)
    manifest: bytes
    expected: FileTable  # path inside the release dir -> sha256 and size of the local file


def expected_of(uploads: list[tuple[Path, str]]) -> FileTable:
    """sha256 and size of every local file to upload."""
    return {rel: FileEntry(*file_digest(src)) for src, rel in uploads}


def write_release(store: ReleaseStore, model: str, version: int | None, render: Callable[[int], ReleaseFiles]) -> int:
    """Write release ``version`` (None: the next number) of ``model``; ``render(N)`` says what it holds.

    Returns the version written.

    Raises:
        ReleaseError: the store is not writable, an upload came back different, the version
        appeared meanwhile (a fixed ``version`` only), or an S3 failure (one message).
    """
    store.fs.probe_writable("releases")
    if store.fs.local or store.fs.s3 is None:
        return _write_staged(store, model, version, render)
    return _write_claimed(store, model, version, render)


def _verify(store: ReleaseStore, rel_dir: str, rf: ReleaseFiles) -> None:
    present = [f for f in store.fs.walk_files(rel_dir) if posixpath.basename(f) != CLAIM]
    raise_on_mismatch(
        compare(rf.expected, present, lambda f: store.fs.sha256(f"{rel_dir}/{f}")),
        "the upload to the release store was corrupted",
        store.fs.path(rel_dir),
        "re-run the command; nothing was published",
    )


def _write_staged(store: ReleaseStore, model: str, version: int | None, render: Callable[[int], ReleaseFiles]) -> int:
    """Local (and other fsspec) stores: staging name, verify, manifest, rename."""
    existing = store.versions(model)
    n = version if version is not None else ((existing[-1] + 1) if existing else 1)
    final = store.release_rel(model, n)
    staged = store.fs.staging_name(final)
    rf = render(n)
    try:
        for src, rel in rf.uploads:
            store.fs.put_file(src, f"{staged}/{rel}")
        _verify(store, staged, rf)
        store.fs.write_new(f"{staged}/manifest.json", rf.manifest)
        if store.fs.exists(final):
            raise ReleaseError(
                f"release version {n} of '{model}' appeared while this one was being written",
                fix="another `release build` or `release import` ran at the same time; run this one again to get the next version",
            )
        store.fs.publish_dir(staged, final)
    except BaseException:
        with contextlib.suppress(Exception):
            store.fs.remove_tree(staged)
        raise
    return n


def _claim(store: ReleaseStore, model: str, version: int | None) -> tuple[int, Lease]:
    """Claim a release number with a conditional create (fixed ``version``, or the next free one)."""
    numbers = [int(n) for n in store.fs.listdir(f"releases/{model}") if n.isdigit()]
    first = version if version is not None else max(numbers, default=0) + 1
    for n in range(first, first + (1 if version is not None else _MAX_CLAIM_TRIES)):
        lease = Lease(store.fs, f"{store.release_rel(model, n)}/{CLAIM}", store.lock_lease_s, f"upload of release {n} of {model}")
        try:
            lease.acquire(take_over=False)
        except Busy as b:
            if version is not None:
                raise ReleaseError(
                    f"release {n} of '{model}' is being written by another process: {b.who()}",
                    fix="wait for it to finish (then `release list`), and import again if it is still missing",
                ) from None
            continue
        if store.fs.exists(f"{store.release_rel(model, n)}/manifest.json"):
            lease.release()  # committed between our listing and our claim
            if version is not None:
                raise ReleaseError(f"release {n} of '{model}' appeared while this one was being written", fix="run `release list`; it may be the same release")
            continue
        return n, lease
    raise ReleaseError(
        f"could not claim a release number for '{model}' after {_MAX_CLAIM_TRIES} tries from {first}", fix="many builds are running at once; retry when they are done"
    )


def _write_claimed(store: ReleaseStore, model: str, version: int | None, render: Callable[[int], ReleaseFiles]) -> int:
    """Object stores: claim N, upload, verify, manifest last (the commit), drop the claim."""
    collect_unfinished(store, model)
    n, lease = _claim(store, model, version)
    rel_dir = store.release_rel(model, n)
    committed = False
    try:
        rf = render(n)
        for src, rel in rf.uploads:
            store.fs.put_file(src, f"{rel_dir}/{rel}")
        _verify(store, rel_dir, rf)
        lease.check()  # still ours: nobody took N over while we uploaded
        try:
            store.fs.write_if(f"{rel_dir}/manifest.json", rf.manifest, None)  # THE commit: one conditional PUT
        except Conflict:
            raise ReleaseError(f"release {n} of '{model}' already has a manifest", fix="another process wrote this number; run the command again") from None
        committed = True
    except BaseException:
        if not committed:
            with contextlib.suppress(Exception):  # if this fails too, the leftover is collected after the lease
                for f in store.fs.walk_files(rel_dir):
                    if posixpath.basename(f) != CLAIM:
                        store.fs.remove_file(f"{rel_dir}/{f}")
        raise
    finally:
        lease.release()
    return n


@dataclass
class Unfinished:
    """A numbered release directory without a manifest: an upload running, or one that died."""

    version: int
    files: int
    age_s: float | None  # since the claim's last heartbeat; None = no claim

    def describe(self, lease_s: float) -> str:
        if self.age_s is not None and self.age_s <= lease_s:
            return f"upload in progress ({self.files} file(s), claim renewed {self.age_s:.0f} s ago): not a release yet"
        return f"unfinished upload ({self.files} file(s), no manifest): not a release; the next `release build` of this model removes it"


def unfinished(store: ReleaseStore, model: str) -> list[Unfinished]:
    """Numbered directories of ``model`` that have no manifest (object stores; local ones stage elsewhere)."""
    out = []
    for name in store.fs.listdir(f"releases/{model}"):
        rel_dir = f"releases/{model}/{name}"
        if not name.isdigit() or store.fs.exists(f"{rel_dir}/manifest.json"):
            continue
        claim = store.fs.tag_and_age(f"{rel_dir}/{CLAIM}")
        files = [f for f in store.fs.walk_files(rel_dir) if posixpath.basename(f) != CLAIM]
        out.append(Unfinished(int(name), len(files), claim[1] if claim else None))
    return out


def collect_unfinished(store: ReleaseStore, model: str) -> list[int]:
    """Remove leftovers of uploads that died (claim older than the lease, or none); returns their numbers.

    A leftover's claim is taken over with If-Match before anything is deleted, and the
    manifest is checked again after that, so a live upload or a just-committed release is never touched.
    """
    removed = []
    for u in unfinished(store, model):
        if u.age_s is not None and u.age_s <= store.lock_lease_s:
            continue
        rel_dir = store.release_rel(model, u.version)
        lease = Lease(store.fs, f"{rel_dir}/{CLAIM}", store.lock_lease_s, f"cleanup of unfinished release {u.version} of {model}")
        try:
            lease.acquire(take_over=True)
        except Busy:
            continue
        try:
            if store.fs.exists(f"{rel_dir}/manifest.json"):
                continue
            for f in store.fs.walk_files(rel_dir):
                if posixpath.basename(f) != CLAIM:
                    store.fs.remove_file(f"{rel_dir}/{f}")
            removed.append(u.version)
        finally:
            lease.release()
    return removed
