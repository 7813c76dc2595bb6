"""Atomic file and directory writes: write beside the target, then rename.

A reader (a later stage, a release, Triton) either sees the old file or the
complete new one, never half of it; a failure leaves the old one in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pipeline.core.errors import PipelineError


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``target``; rename it onto ``target`` on success.

    Works for files and directories. On any exception the temporary path is
    removed and ``target`` is untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    # mkdtemp gives a unique name; the caller decides whether it is a file or a dir.
    tmp.rmdir()
    tmp = tmp.with_name(tmp.name + suffix)
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"atomic write produced nothing at {tmp}")
        if tmp.is_dir() and target.exists():
            # os.replace cannot replace a non-empty directory: move the old one aside first.
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_text(target: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``target`` atomically."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as pretty JSON to ``target`` atomically."""
    write_text(target, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def remove_stale(*paths: str | os.PathLike[str]) -> None:
    """Remove outputs of a previous run so a failed stage cannot leave them for a later one."""
    for p in map(Path, paths):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


def read_json(path: str | os.PathLike[str], error: type[PipelineError], what: str, fix: str) -> Any:
    """Read a JSON file; raise ``error`` (a PipelineError subclass) saying whether it is missing or unreadable."""
    p = Path(path)
    if not p.is_file():
        raise error(f"{what} not found: {p}", fix=fix)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise error(f"{what} {p} is not readable JSON", fix=fix, details={"error": e}) from None


def stream_digest(f: IO[bytes], chunk: int = 1 << 20) -> tuple[str, int]:
    """sha256 hex digest and size of an open binary stream, read in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    for block in iter(lambda: f.read(chunk), b""):
        h.update(block)
        size += len(block)
    return h.hexdigest(), size


def file_digest(path: str | os.PathLike[str]) -> tuple[str, int]:
    """sha256 hex digest and size of a local file."""
    with open(path, "rb") as f:
        return stream_digest(f)
