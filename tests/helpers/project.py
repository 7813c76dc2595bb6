"""The one harness for tests that need this project as a user has it: copies of its files, a throwaway git + DVC
repo, real commands run in it, and projects built once per session and copied for each test that changes them.

- ``copy_checkout(dest, *names)``: files and folders of this checkout (conf/ alone, or the pipeline's code).
- ``make_project(dest, overrides)``: a git repo holding a copy of the pipeline, its params.yaml composed from conf/.
- ``sh(cwd, *cmd)``: a command as a user runs it there (the venv first on PATH, the copy importable, a git identity).
- ``Builds``: a ``Recipe`` built once (make_project, commit, ``dvc repro``) for the whole session, shared by the
  xdist workers through a file lock, and copied whole (git history, DVC cache and run cache, artifacts) per test.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import signal
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from filelock import FileLock

from pipeline.params import compose

ROOT = Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
DVC = [sys.executable, "-m", "dvc"]
RELEASE_CLI = [sys.executable, "-m", "pipeline.cli", "release"]
# What a project copy holds: the code a stage imports (tests/ too: factories and data hooks live there), its
# config, the native backend's sources, and DVC's files. `extra` adds more top-level folders (examples, scripts).
PROJECT_DIRS = ("pipeline", "conf", "tests", "hydra_plugins", "native")
PROJECT_FILES = ("dvc.yaml", ".dvcignore", ".gitignore")
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def script(name: str) -> ModuleType:
    """``scripts/<name>.py`` loaded as a module (scripts/ is not a package: each script runs as a file)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sh(cwd: Path, *cmd: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in ``cwd`` as a user would: the venv's python first on PATH, ``cwd`` importable, a git identity
    for commits and tags (``env`` is added last). Raises AssertionError with the output when ``check`` and it fails."""
    base = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(cwd), "DVC_NO_ANALYTICS": "1", **IDENTITY}
    # Its own session: on a timeout the whole tree goes (a stage under dvc, its servers), and the output so far is
    # in the failure, so a hang in CI says where it was.
    with subprocess.Popen(cmd, cwd=cwd, env={**base, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # a grandchild in a session of its own still holds the pipes
                out, err = "", "(no output: a process outside the killed group still holds its pipes)"
            raise AssertionError(f"{cmd} still running after {timeout:.0f} s; its output so far:\n{out[-4000:]}\n{err[-4000:]}") from None
    res = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and res.returncode != 0:
        raise AssertionError(f"{cmd} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def copy_checkout(dest: Path, *names: str) -> Path:
    """Copy the top-level files and folders ``names`` of this checkout into ``dest`` (bytecode left out); returns dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dest / name)
    return dest


def make_project(dest: Path, overrides: list[str] | tuple[str, ...], extra: tuple[str, ...] = (), prepare: Callable[[Path], object] | None = None) -> Path:
    """Copy the pipeline (and ``extra`` top-level folders, e.g. "examples") into a new git repo at ``dest``.

    ``prepare(dest)`` puts the model files in place; then params.yaml is composed with ``overrides``
    (composition checks that the files a config names exist).
    """
    copy_checkout(dest, *(n for n in (*PROJECT_DIRS, *extra) if (ROOT / n).is_dir()), *PROJECT_FILES)
    if (ROOT / ".tools").is_dir():  # setup's downloads (the native bench backend's headers), not in git
        (dest / ".tools").symlink_to(ROOT / ".tools")
    (dest / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", dest / ".dvc" / "config")
    if prepare is not None:
        prepare(dest)
    write_params(dest, overrides)
    sh(dest, "git", "init", "-q")
    return dest


def write_params(project: Path, overrides: list[str] | tuple[str, ...]) -> None:
    """Compose the project's conf/ with ``overrides`` into its params.yaml (what `python -m pipeline.params` does)."""
    (project / "params.yaml").write_text(compose(list(overrides), project / "conf"), encoding="utf-8")


_COMPOSED: dict[tuple[str, ...], tuple[str, str]] = {}


def composed(overrides: Sequence[str]) -> str:
    """``compose(overrides)`` for this checkout's conf/, run once per process for each list of overrides.

    The checkout does not change during a session, and a Hydra composition (about 0.2 s) is most of a config test's
    time. The notes a composition prints are printed again on a repeat, so a test reading them sees what a fresh
    composition prints. A failure is never kept, and overrides that name a file (a ``/``, or a ``path`` or
    ``checkpoint`` key) are composed every time: the file may change between calls.
    """
    key = tuple(overrides)
    if any("/" in o or o.split("=", 1)[0].endswith(("path", "checkpoint")) for o in key):
        return compose(list(key))
    if key in _COMPOSED:
        text, printed = _COMPOSED[key]
        sys.stderr.write(printed)
        return text
    notes = io.StringIO()
    try:
        with contextlib.redirect_stderr(notes):
            text = compose(list(key))
    finally:
        sys.stderr.write(notes.getvalue())
    _COMPOSED[key] = (text, notes.getvalue())
    return text


def commit(project: Path, message: str = "commit") -> None:
    """Commit everything in ``project`` (an empty commit when nothing changed: a rerun that rewrote nothing)."""
    sh(project, *GIT, "add", "-A")
    sh(project, *GIT, "commit", "-qm", message, "--allow-empty")


# The stages a change of the model's weights or code must rerun (export and everything after it up to the repository).
MODEL_STAGES = ["export", "simplify", "fp16", "parity", "repository"]


def ran(stdout: str) -> list[str]:
    """Stage names `dvc repro` ran, in order."""
    return [ln.split("'")[1] for ln in stdout.splitlines() if ln.startswith("Running stage '")]


# ---------------------------------------------------------------- models the recipes put in place
def two_io_model(project: Path) -> None:
    """models/two.onnx: two inputs and two outputs, inputs read from the graph (model=onnx lists none)."""
    from tests.helpers.tiny_models import two_io_onnx

    (project / "models").mkdir()
    two_io_onnx(str(project / "models" / "two.onnx"), seed=0)


# ---------------------------------------------------------------- built once per session, copied per test
@dataclass(frozen=True)
class Recipe:
    """A project to build once per session: make_project's arguments, then a commit, ``dvc repro <repro>`` and a
    second commit. ``prepare`` must be a named function: its name is part of the key."""

    name: str
    overrides: tuple[str, ...]
    prepare: Callable[[Path], object] | None = None
    extra: tuple[str, ...] = ()
    repro: str = "repository"

    @property
    def key(self) -> str:
        """A directory name that changes with anything that changes the build."""
        prepare = f"{self.prepare.__module__}.{self.prepare.__qualname__}" if self.prepare else ""
        digest = hashlib.sha256(repr((self.overrides, prepare, self.extra, self.repro)).encode()).hexdigest()[:10]
        return f"{self.name}-{digest}"


@dataclass(frozen=True)
class Built:
    """A test's own copy of a built project, and what the build's first `dvc repro` printed."""

    path: Path
    first_repro: str


TWO = Recipe("two", ("model=onnx", "model.name=two", "model.path=models/two.onnx"), two_io_model)


def build_once(done: Path, build: Callable[[Path], object]) -> Path:
    """``done``, built by ``build(dir)`` in the first process that asks (the others wait on its lock): into a partial
    directory renamed when complete, so a failed or killed build is never taken for a built one."""
    with FileLock(str(done) + ".lock"):
        if not done.is_dir():
            partial = done.with_name(f"{done.name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            try:
                build(partial)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            partial.rename(done)
    return done


class Builds:
    """Built projects under ``root``, each built by the first process that asks for it (the others wait on its lock)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def template(self, recipe: Recipe) -> Path:
        """The built project of ``recipe`` (never to be changed: copy it). Raises AssertionError if the build fails."""
        return build_once(self.root / recipe.key, lambda where: self._build(recipe, where))

    def copy(self, recipe: Recipe, dest: Path) -> Built:
        """A copy of ``recipe``'s built project at ``dest``: the working tree, git history, DVC cache and run cache."""
        template = self.template(recipe)
        shutil.copytree(template / "proj", dest, symlinks=True)
        return Built(dest, (template / "first_repro.log").read_text(encoding="utf-8"))

    @staticmethod
    def _build(recipe: Recipe, where: Path) -> None:
        proj = make_project(where / "proj", recipe.overrides, recipe.extra, recipe.prepare)
        commit(proj, "init")
        out = sh(proj, *DVC, "repro", recipe.repro).stdout
        commit(proj, "first run")
        (where / "first_repro.log").write_text(out, encoding="utf-8")
