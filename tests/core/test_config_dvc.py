"""The real `dvc exp run -S ...` runs every config check while it composes params.yaml.

DVC composes conf/ itself and never calls our code; the Hydra plugin under hydra_plugins/ registers the
resolver that conf/config.yaml's ``config_check`` key calls, so a bad value fails before any stage runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.params import compose
from tests.helpers.project import commit, make_project, sh

pytestmark = pytest.mark.dvc


def run(cwd: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it: the venv first on PATH, the copy (not this checkout) importable."""
    return sh(cwd, *cmd, check=False, timeout=120)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git + DVC copy of the project with its committed params.yaml (no model files: nothing may run)."""
    proj = make_project(tmp_path_factory.mktemp("cfg") / "proj", [])
    commit(proj, "init")
    return proj


def _exp_refs(proj: Path) -> str:
    return run(proj, "git", "for-each-ref", "refs/exps").stdout


def test_bad_value_fails_at_composition_before_any_stage(project: Path) -> None:
    before = (project / "params.yaml").read_bytes()
    res = run(project, sys.executable, "-m", "dvc", "exp", "run", "-S", "bench.protocol=grcp", "-S", "parity.max_samples=0")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "bench.protocol='grcp': not one of [http, grpc]; did you mean 'grpc'?" in out, out
    assert "parity.max_samples=0: must be >= 1" in out and "2 problems in the config composed from conf/" in out
    assert "Running stage" not in out and not (project / "artifacts").exists()
    # DVC stashes the workspace, composes, and pops the stash back when composition raises: nothing changed.
    assert (project / "params.yaml").read_bytes() == before
    assert run(project, "git", "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert run(project, "git", "stash", "list").stdout == "" and _exp_refs(project) == ""


def test_variant_group_override_points_to_default_variant(project: Path) -> None:
    res = run(project, sys.executable, "-m", "dvc", "exp", "run", "-S", "variant=throughput")
    assert res.returncode != 0 and "repository.default_variant=throughput" in res.stdout + res.stderr


def test_valid_overrides_compose_as_pipeline_params_does(project: Path) -> None:
    """`--queue` composes and commits params.yaml to the queue's stash without running a stage."""
    res = run(project, sys.executable, "-m", "dvc", "exp", "run", "--queue", "-S", "model=cnn", "-S", "repository.version=2")
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        queued = run(project, "git", "show", "refs/exps/celery/stash:params.yaml").stdout
        assert queued == compose(["model=cnn", "repository.version=2"], project / "conf")
        assert "config_check: passed (pipeline/core/config)" in queued
    finally:
        run(project, sys.executable, "-m", "dvc", "queue", "remove", "--all")
