"""A throwaway git + DVC copy of this project, and a runner for real `dvc` commands in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.params import compose

ROOT = Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
DVC = [sys.executable, "-m", "dvc"]


def sh(cwd: Path, *cmd: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command as a user would, with the venv's python first on PATH and the copy importable (``env`` added)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(cwd), "DVC_NO_ANALYTICS": "1", **(env or {})}
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"{cmd} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def make_project(dest: Path, overrides: list[str], extra: tuple[str, ...] = (), prepare: Callable[[Path], object] | None = None) -> Path:
    """Copy the pipeline (and ``extra`` top-level folders, e.g. "examples") into a new git repo at ``dest``.

    ``prepare(dest)`` puts the model files in place; then params.yaml is composed with ``overrides``
    (composition checks that the files a config names exist).
    """
    for name in ("pipeline", "conf", "tests", "hydra_plugins", "native", *extra):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(ROOT / name, dest / name)
    if (ROOT / ".tools").is_dir():  # setup's downloads (the native bench backend's headers), not in git
        (dest / ".tools").symlink_to(ROOT / ".tools")
    (dest / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", dest / ".dvc" / "config")
    if prepare is not None:
        prepare(dest)
    write_params(dest, overrides)
    sh(dest, "git", "init", "-q")
    return dest


def write_params(project: Path, overrides: list[str]) -> None:
    """Compose the project's conf/ with ``overrides`` into its params.yaml (what `python -m pipeline.params` does)."""
    (project / "params.yaml").write_text(compose(overrides, project / "conf"), encoding="utf-8")


def commit(project: Path, message: str = "commit") -> None:
    sh(project, *GIT, "add", "-A")
    sh(project, *GIT, "commit", "-qm", message)


def ran(stdout: str) -> list[str]:
    """Stage names `dvc repro` ran, in order."""
    return [ln.split("'")[1] for ln in stdout.splitlines() if ln.startswith("Running stage '")]
