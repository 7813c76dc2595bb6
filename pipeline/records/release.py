"""What a release records about itself, and the check that its files still match.

The manifest holds the sha256 of every file, the git commit, the dvc.lock hashes of the
stages that produced the repository, whether DVC saw them up to date, the parity and bench
summaries (see :mod:`pipeline.release.evidence`) and the environment.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import importlib.metadata
import json
import platform
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.core.errors import ReleaseError

SCHEMA = 1
# Packages whose versions decide what a release contains or how it was checked.
_PACKAGES = ("dvc", "onnx", "onnxruntime", "onnxsim", "onnxconverter-common", "polygraphy", "torch", "transformers", "tritonclient", "tensorrt")


# ---------------------------------------------------------------- file checksums
FileTable = dict[str, dict[str, Any]]  # relative path -> {"sha256": hex, "size": bytes}


@dataclass
class Mismatch:
    """One way the files on disk differ from the manifest."""

    kind: str  # changed | missing | unexpected
    path: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}" + (f" ({self.detail})" if self.detail else "")


def compare(expected: FileTable, actual_files: list[str], hasher: Any) -> list[Mismatch]:
    """Every difference between ``expected`` and the files present (hashing only listed files).

    ``hasher(rel) -> (sha256, size)`` reads one file; it is injected so the same check
    runs on a release in the store and on a version copied into an environment.
    """
    problems: list[Mismatch] = []
    present = set(actual_files)
    for path in sorted(set(expected) - present):
        problems.append(Mismatch("missing", path))
    for path in sorted(present - set(expected)):
        problems.append(Mismatch("unexpected", path, "file not in the manifest"))
    for path in sorted(present & set(expected)):
        digest, size = hasher(path)
        want = expected[path]
        if digest != want["sha256"]:
            problems.append(Mismatch("changed", path, f"sha256 {digest[:12]}... != manifest {want['sha256'][:12]}..., size {size} vs {want['size']}"))
    return problems


def raise_on_mismatch(problems: list[Mismatch], what: str, where: str, fix: str) -> None:
    """Raise one :class:`ReleaseError` listing every mismatch (none: return)."""
    if problems:
        raise ReleaseError(
            f"{what}: {len(problems)} file(s) differ from the manifest",
            fix=fix,
            details={"location": where, "problems": "\n    " + "\n    ".join(map(str, problems))},
        )


# ---------------------------------------------------------------- inputs of a release
def dvc_lock_hashes(path: str | Path) -> dict[str, Any]:
    """Per stage, the md5 of every dep and out recorded in dvc.lock (what the release was built from)."""
    p = Path(path)
    if not p.is_file():
        raise ReleaseError(f"dvc.lock not found: {p}", fix="run `dvc repro` first so the repository has recorded inputs, or pass --dvc-lock")
    try:
        lock = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ReleaseError(f"cannot parse {p}", fix="restore dvc.lock from git and re-run `dvc repro`", details={"error": e}) from None
    out: dict[str, Any] = {}
    for stage, body in (lock.get("stages") or {}).items():
        out[stage] = {kind: {d["path"]: d.get("md5") or d.get("hash") for d in body.get(kind, []) if isinstance(d, dict) and "path" in d} for kind in ("deps", "outs")}
    return out


def git_info(cwd: str | Path = ".") -> dict[str, Any]:
    """HEAD commit, branch and whether the work tree has changes (None values outside git)."""

    def git(*args: str) -> str | None:
        try:
            # --no-optional-locks: reading status must not rewrite the index of the user's repo.
            r = subprocess.run(["git", "--no-optional-locks", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "branch": None, "dirty": None, "toplevel": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "branch": git("rev-parse", "--abbrev-ref", "HEAD"), "dirty": bool(status), "toplevel": git("rev-parse", "--show-toplevel")}


def environment() -> dict[str, Any]:
    """Where and with what the release was built."""
    pkgs = {}
    for name in _PACKAGES:
        try:
            pkgs[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return {"python": platform.python_version(), "platform": platform.platform(), "host": socket.gethostname(), "user": user, "packages": pkgs}


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_manifest(model: str, version: int, files: FileTable, source: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """The manifest of a release about to be written."""
    return {"schema": SCHEMA, "model": model, "version": version, "created_at": now(), "source": source, "files": files, **sections}


def load_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """Parse and sanity-check a manifest."""
    try:
        m = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ReleaseError(f"corrupt manifest {where}", fix="restore the release from a backup or an exported archive", details={"error": e}) from None
    if not isinstance(m, dict) or m.get("schema") != SCHEMA or not isinstance(m.get("files"), dict):
        raise ReleaseError(f"not a release manifest (schema {SCHEMA}): {where}", fix="restore the release from a backup or an exported archive")
    return m


def inconsistent(m: dict[str, Any]) -> list[Mismatch]:
    """Where the manifest contradicts itself: evidence that vouches for other bytes than its ``files`` table lists.

    A tampered file whose new sha256 was written into ``files`` still disagrees with the sha256 parity (and the bench)
    vouched for, which the manifest also records; on an unsigned store this is what catches it.
    """
    files, version, out = m.get("files") or {}, m.get("version"), []
    for name, s in ((m.get("parity") or {}).get("served") or {}).items():
        listed = (files.get(f"{version}/{name}") or {}).get("sha256")
        if isinstance(s, dict) and listed != s.get("sha256"):
            out.append(Mismatch("inconsistent", f"{version}/{name}", f"files lists sha256 {str(listed)[:12]}..., parity vouched for {str(s.get('sha256'))[:12]}..."))
    bench = m.get("bench") or {}
    for variant, sha in (bench.get("configs_sha256") or {}).items() if bench.get("status") == "measured" else ():
        listed = (files.get(f"configs/{variant}.pbtxt") or {}).get("sha256")
        if listed != sha:
            out.append(Mismatch("inconsistent", f"configs/{variant}.pbtxt", f"files lists sha256 {str(listed)[:12]}..., the bench measured {str(sha)[:12]}..."))
    return out
