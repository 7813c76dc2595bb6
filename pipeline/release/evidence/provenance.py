"""Where a release comes from: the git commit, the dvc.lock hashes of its stages, and the machine that built it."""

from __future__ import annotations

import getpass
import importlib.metadata
import platform
import socket
import subprocess
from pathlib import Path

import yaml

from pipeline.core.errors import ReleaseError
from pipeline.records.release import DvcLockHashes, EnvironmentInfo, GitInfo

# Packages whose versions decide what a release contains or how it was checked.
_PACKAGES = ("dvc", "onnx", "onnxruntime", "onnxsim", "onnxconverter-common", "polygraphy", "torch", "transformers", "tritonclient", "tensorrt")


def dvc_lock_hashes(path: str | Path) -> DvcLockHashes:
    """Per stage, the md5 of every dep and out recorded in dvc.lock (what the release was built from).

    Raises:
        ReleaseError: dvc.lock is missing or not YAML.
    """
    p = Path(path)
    if not p.is_file():
        raise ReleaseError(f"dvc.lock not found: {p}", fix="run `dvc repro` first so the repository has recorded inputs, or pass --dvc-lock")
    try:
        lock = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ReleaseError(f"cannot parse {p}", fix="restore dvc.lock from git and re-run `dvc repro`", details={"error": e}) from None
    out: DvcLockHashes = {}
    for stage, body in (lock.get("stages") or {}).items():
        out[stage] = {kind: {d["path"]: d.get("md5") or d.get("hash") for d in body.get(kind, []) if isinstance(d, dict) and "path" in d} for kind in ("deps", "outs")}
    return out


def git_info(cwd: str | Path = ".") -> GitInfo:
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
        return GitInfo(None, None, None, None)
    status = git("status", "--porcelain", "--untracked-files=no")
    return GitInfo(commit, git("rev-parse", "--abbrev-ref", "HEAD"), bool(status), git("rev-parse", "--show-toplevel"))


def environment() -> EnvironmentInfo:
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
    return EnvironmentInfo(platform.python_version(), platform.platform(), socket.gethostname(), user, pkgs)
