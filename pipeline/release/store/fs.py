"""Filesystem access for the release store, through fsspec so any URL works the same way.

A local path or ``file://`` URL, ``s3://bucket/prefix``, ``memory://`` (used by tests) all
go through :class:`StoreFS`. Only two operations differ by backend, and both are here:

- :meth:`StoreFS.write_atomic` - on a local disk a temp file in the same directory, fsync,
  then ``os.replace`` (POSIX rename is atomic); on an object store one PUT of the whole
  object (S3, GCS and Azure make a single-object write atomic: a reader gets the old
  object or the new one, never a mix).
- :meth:`StoreFS.publish_dir` - a staged directory becomes visible under its final
  name: ``os.rename`` locally; on object stores a copy then delete (object stores have
  no directories, so a reader can see a partly copied prefix; the pointer flip happens
  only after every file is verified, so that is never the *live* version).

On ``s3://`` stores (:mod:`pipeline.release.store.s3`) three things differ more: no ``makedirs`` (s3fs
would create a missing bucket instead of failing), every S3 failure becomes one
:class:`ReleaseError` (unreachable, no bucket, credentials, permission; never a secret), and
:meth:`StoreFS.read_tagged` / :meth:`StoreFS.write_if` map to S3 conditional writes, so a lost race is
refused by the server itself (:class:`~pipeline.release.store.s3.Conflict`). Locally the same calls compare a
sha256 and replace, which is safe because local writers are serialized by an flock.

Local files and directories get the modes the process umask gives (644 / 755 by default), so
a Triton server or an operator running as another user can read an environment. Directories
(``os.makedirs``) and copies (``shutil.copyfile``) get them already; a temp file from
:func:`tempfile.mkstemp` is 600 whatever the umask, so :meth:`StoreFS.write_atomic` sets it to
``0o666 & ~umask`` before the rename.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import os
import posixpath
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipeline.core.atomic import stream_digest
from pipeline.core.errors import ReleaseError
from pipeline.release.store import s3
from pipeline.release.store.s3 import Conflict

F = TypeVar("F", bound=Callable[..., Any])


def _umask_at_import() -> int:
    # os.umask can only be read by setting it; doing that once, at import, keeps the
    # set/restore window out of any thread that writes files later.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_IMPORT_UMASK = _umask_at_import()


def current_umask() -> int:
    """The process umask, read without changing it (Linux's /proc), else the one seen at import."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _IMPORT_UMASK


def file_mode() -> int:
    """Mode of a new regular file: what ``open(path, "w")`` would give (644 under umask 022)."""
    return 0o666 & ~current_umask()


def _remote(action: str) -> Callable[[F], F]:
    """On an S3 store, turn any S3 failure of the method into one ReleaseError (local stores: unchanged)."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: StoreFS, *args: Any, **kwargs: Any) -> Any:
            if self.s3 is None:
                return fn(self, *args, **kwargs)
            try:
                return fn(self, *args, **kwargs)
            except (ReleaseError, Conflict):
                raise
            except s3.s3_errors() as e:
                raise s3.translate(e, self.s3, f"{action} {self.show(str(args[0])) if args else ''}".strip()) from None

        return cast(F, wrapper)

    return deco


class StoreFS:
    """One fsspec filesystem and a root path inside it; every path argument is relative to the root.

    Raises (on construction):
        ReleaseError: no filesystem package for the URL; for s3:// also a malformed URL, an
        unreachable endpoint, a missing bucket or rejected credentials (checked with one request).
    """

    def __init__(self, url: str | os.PathLike[str]) -> None:
        self.url = str(url)
        self.s3: s3.S3Location | None = None
        if self.url.startswith("s3://"):
            self.s3 = s3.locate(self.url)
            try:
                self.fs = s3.open_fs(self.s3)
            except ImportError as e:
                raise ReleaseError(f"cannot open release store '{self.url}'", fix="install the s3 extra (pip install -e '.[s3]': s3fs)", details={"error": e}) from None
            s3.preflight(self.fs, self.s3)
            self.root = self.s3.root
            self.local = False
            return
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError) as e:
            raise ReleaseError(
                f"cannot open release store '{self.url}'",
                fix="use a local path or an fsspec URL whose filesystem package is installed (e.g. s3fs for s3://)",
                details={"error": e},
            ) from None
        self.root = root.rstrip("/") or "/"
        self.local = isinstance(self.fs, LocalFileSystem)

    @property
    def atomic_conditions(self) -> bool:
        """Whether :meth:`write_if` is decided atomically by the storage (S3) rather than compare-then-write."""
        return self.s3 is not None

    # ------------------------------------------------------------ paths
    def path(self, *parts: str) -> str:
        """Absolute path inside the filesystem for ``parts`` under the root."""
        return posixpath.join(self.root, *parts)

    def local_path(self, *parts: str) -> Path:
        """A real OS path (only for local stores; Triton and model-signing need one)."""
        if not self.local:
            raise ReleaseError(
                f"'{self.url}' is not a local filesystem",
                fix="this operation needs a local path (mount the store, or copy the release locally first)",
            )
        return Path(self.path(*parts))

    def show(self, rel: str = "") -> str:
        """``rel`` as a user names it: a local path, or ``s3://bucket/key``."""
        return self.s3.url(self.path(rel).partition("/")[2]) if self.s3 is not None else self.path(rel)

    def triton_url(self, rel: str) -> str:
        """What ``tritonserver --model-repository`` takes for ``rel``: a local path, or an s3:// URL with the endpoint."""
        if self.s3 is not None:
            return self.s3.triton_url(self.path(rel).partition("/")[2])
        if self.local:
            return self.path(rel)
        protocol = self.fs.protocol[0] if isinstance(self.fs.protocol, (tuple, list)) else self.fs.protocol
        return f"{protocol}://{self.path(rel).lstrip('/')}"

    @_remote("checking")
    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    @_remote("listing")
    def listdir(self, rel: str) -> list[str]:
        """Names (not paths) directly under ``rel``; empty when it does not exist."""
        try:
            entries = self.fs.ls(self.path(rel), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(posixpath.basename(e.rstrip("/")) for e in entries)

    @_remote("listing")
    def walk_files(self, rel: str) -> list[str]:
        """Every file under ``rel``, as paths relative to ``rel`` with ``/`` separators."""
        base = self.path(rel).rstrip("/")
        if not self.fs.isdir(base):
            return []
        out = []
        for full in self.fs.find(base, withdirs=False):
            out.append(posixpath.relpath(full, base))
        return sorted(out)

    # ------------------------------------------------------------ read / hash
    @_remote("reading")
    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open(self.path(rel), "rb") as f:
            return f.read()

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    @_remote("hashing")
    def sha256(self, rel: str) -> tuple[str, int]:
        """sha256 hex digest and size of a file, streamed in 1 MiB chunks."""
        with self.fs.open(self.path(rel), "rb") as f:
            return stream_digest(f)

    # ------------------------------------------------------------ write
    @_remote("writing a probe object under")
    def probe_writable(self, rel: str = "") -> None:
        """Create ``rel`` and write/delete a probe file in it; refuse early if that fails.

        Checking by writing is the only reliable test: as root, permission bits do not
        stop writes, while a read-only mount, a path under a regular file, /proc or a
        bucket without write permission do.
        """
        target = self.path(rel)
        probe = posixpath.join(target, f".write-probe-{uuid.uuid4().hex}")
        try:
            if self.s3 is None:  # s3fs.makedirs would create a missing bucket
                self.fs.makedirs(target, exist_ok=True)
            self.fs.pipe_file(probe, b"probe")
            self.fs.rm_file(probe)
        except (OSError, PermissionError, NotImplementedError) as e:
            raise ReleaseError(
                f"the release store is not writable: {self.url}",
                fix="pass --store with a writable directory or URL (or set release.store in conf/release/default.yaml)",
                details={"path": target, "error": f"{type(e).__name__}: {e}"},
            ) from None

    @_remote("writing")
    def write_atomic(self, rel: str, data: bytes) -> None:
        """Replace the file ``rel`` in one atomic step (see the module docstring)."""
        target = self.path(rel)
        parent = posixpath.dirname(target)
        if not self.local:
            self.fs.pipe_file(target, data)  # a single-object PUT is atomic on object stores
            return
        self.fs.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{posixpath.basename(target)}.", suffix=".tmp", dir=parent)
        try:
            os.fchmod(fd, file_mode())  # mkstemp makes 600: other users (Triton, operators) could not read the store
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # the rename must never expose a file whose bytes are not on disk
            os.replace(tmp, target)
            _fsync_dir(parent)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def write_new(self, rel: str, data: bytes) -> None:
        """Write a file that must not exist yet (immutable release content)."""
        if self.exists(rel):
            raise ReleaseError(f"refusing to overwrite {self.path(rel)}", fix="releases are immutable; build a new one")
        self.write_atomic(rel, data)

    @_remote("uploading")
    def put_file(self, local_src: str | os.PathLike[str], rel: str) -> None:
        """Copy a local file into the store."""
        dst = self.path(rel)
        if self.local:
            self.fs.makedirs(posixpath.dirname(dst), exist_ok=True)
        self.fs.put_file(str(local_src), dst)

    @_remote("copying")
    def copy_file(self, src_rel: str, dst_rel: str) -> None:
        """Copy a file within the store."""
        dst = self.path(dst_rel)
        if self.local:
            self.fs.makedirs(posixpath.dirname(dst), exist_ok=True)
        self.fs.cp_file(self.path(src_rel), dst)  # on S3 a server-side copy: no bytes through this process

    @_remote("downloading")
    def get_dir(self, rel: str, local_dst: str | os.PathLike[str]) -> None:
        """Copy a store directory to a local directory (for tools that need real paths)."""
        for f in self.walk_files(rel):
            out = Path(local_dst) / f
            out.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(self.path(rel, f), str(out))

    def staging_name(self, final_rel: str) -> str:
        """A sibling name for staging ``final_rel``; Triton ignores it (not a number)."""
        d, name = posixpath.split(final_rel)
        return posixpath.join(d, f".staging-{name}-{uuid.uuid4().hex[:8]}")

    @_remote("publishing")
    def publish_dir(self, staged_rel: str, final_rel: str) -> None:
        """Give a fully written and verified staged directory its final name."""
        src, dst = self.path(staged_rel), self.path(final_rel)
        if self.local:
            os.rename(src, dst)  # atomic; fails if dst exists and is not empty, which we want
            _fsync_dir(posixpath.dirname(dst))
            return
        self.fs.copy(src, dst, recursive=True)
        self.fs.rm(src, recursive=True)

    @_remote("removing")
    def remove_file(self, rel: str) -> None:
        """Delete one file (absent: nothing to do)."""
        try:
            self.fs.rm_file(self.path(rel))
        except FileNotFoundError:
            pass

    @_remote("removing")
    def remove_tree(self, rel: str) -> None:
        p = self.path(rel)
        if self.fs.exists(p):
            self.fs.rm(p, recursive=True)

    # ------------------------------------------------------------ conditional writes (locks, pointer, history)
    @_remote("reading")
    def read_tagged(self, rel: str) -> tuple[bytes, str] | None:
        """The bytes of ``rel`` and a tag of that version (S3: its ETag; elsewhere: its sha256); None when absent."""
        if self.s3 is not None:
            return s3.get(self.fs, self.path(rel))
        try:
            data = self.read_bytes(rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return data, hashlib.sha256(data).hexdigest()

    @_remote("writing")
    def write_if(self, rel: str, data: bytes, tag: str | None) -> str:
        """Replace ``rel`` only if it is still the version ``tag`` (None: only if it does not exist).

        Returns the new tag. Raises :class:`~pipeline.release.store.s3.Conflict` otherwise. On S3 the server
        decides (If-Match / If-None-Match); elsewhere it is compare-then-replace: safe on local stores
        (writers hold an flock), not across processes on gs:// or az:// (their generation/ETag
        preconditions are not wired here; run one release job per environment there).
        """
        if self.s3 is not None:
            return s3.put(self.fs, self.path(rel), data, match=tag, create=tag is None)
        current = self.read_tagged(rel)
        if (current[1] if current else None) != tag:
            raise Conflict(self.path(rel))
        self.write_atomic(rel, data)
        return hashlib.sha256(data).hexdigest()

    @_remote("checking")
    def tag_and_age(self, rel: str) -> tuple[str, float] | None:
        """Tag and age in seconds of ``rel`` (S3: by the server's clock), None when absent."""
        if self.s3 is not None:
            h = s3.head(self.fs, self.path(rel))
            return (h.etag, h.age_s) if h else None
        current = self.read_tagged(rel)
        if current is None:
            return None
        modified = self.fs.modified(self.path(rel))
        if modified.tzinfo is None:
            modified = modified.replace(tzinfo=_dt.timezone.utc) if not self.local else modified.astimezone()
        return current[1], (_dt.datetime.now(_dt.timezone.utc) - modified).total_seconds()

    @_remote("removing")
    def delete_if(self, rel: str, tag: str) -> None:
        """Delete ``rel`` only if it is still the version ``tag`` (absent: nothing to do). Raises Conflict."""
        if self.s3 is not None:
            s3.delete(self.fs, self.path(rel), match=tag)
            return
        current = self.read_tagged(rel)
        if current is None:
            return
        if current[1] != tag:
            raise Conflict(self.path(rel))
        self.fs.rm_file(self.path(rel))


def _fsync_dir(path: str) -> None:
    """Persist a rename: fsync the directory entry (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems do not support fsync on directories; the rename itself is still atomic
    finally:
        os.close(fd)
