"""The real `dvc repro` / `dvc exp run` on a copy of this project, with a tiny ONNX model.

Shows: both ways of running agree on params; a second repro is a no-op, also after Python
wrote bytecode; changing only a variant value reruns only the repository stage (never
export/simplify/fp16);
a bad input fails with one message and leaves dvc.lock unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.params import compose
from tests.helpers.dvc_project import GIT, make_project, sh
from tests.helpers.tiny_models import export_tiny_onnx

pytestmark = pytest.mark.slow
BASE = ["model=onnx", "model.name=tiny", "model.path=models/tiny.onnx"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repo holding a copy of the pipeline, configured for a tiny ONNX model."""

    def tiny(p: Path) -> None:
        (p / "models").mkdir()
        export_tiny_onnx(str(p / "models" / "tiny.onnx"))

    proj = make_project(tmp_path / "proj", BASE, prepare=tiny)
    sh(proj, *GIT, "add", "-A")
    sh(proj, *GIT, "commit", "-qm", "init")
    return proj


def test_repro_noop_and_variant_change_reruns_only_repository(project: Path) -> None:
    dvc = [sys.executable, "-m", "dvc"]
    first = sh(project, *dvc, "repro", "repository")
    for stage in ("export", "simplify", "fp16", "parity", "repository"):
        assert f"Running stage '{stage}'" in first.stdout
    assert (project / "artifacts" / "model_repository" / "tiny" / "configs" / "throughput.pbtxt").is_file()
    # Bytecode is not a code dependency (.dvcignore): a new or rewritten .pyc beside the sources changes nothing.
    stray = project / "pipeline" / "core" / "__pycache__" / "stray.cpython-311.pyc"
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"not the sources")
    # The machine probe is always_changed by design (engines must notice another GPU); nothing else reruns.
    status = sh(project, *dvc, "status", "repository").stdout
    assert status.strip().splitlines() == ["probe:", "\talways changed"] or "up to date" in status, status
    second = sh(project, *dvc, "repro", "repository")
    assert [ln for ln in second.stdout.splitlines() if ln.startswith("Running stage")] == ["Running stage 'probe':"], second.stdout

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    sh(project, *git, "add", "-A")
    sh(project, *git, "commit", "-qm", "first run")
    overrides = [*BASE, "variants.latency.instance_count=3"]
    exp = sh(project, *dvc, "exp", "run", "repository", *[a for o in overrides for a in ("-S", o)])
    ran = {s for s in ("export", "simplify", "fp16", "parity", "engine@cpu", "repository") if f"Running stage '{s}'" in exp.stdout}
    assert ran == {"repository"}, exp.stdout
    # dvc exp run composed conf/ itself: the result equals our composer's output for the same overrides.
    assert (project / "params.yaml").read_text() == compose(overrides, project / "conf")
    latency = (project / "artifacts" / "model_repository" / "tiny" / "configs" / "latency.pbtxt").read_text()
    assert "count: 3" in latency


def test_bad_input_leaves_lock_and_artifacts(project: Path) -> None:
    dvc = [sys.executable, "-m", "dvc"]
    sh(project, *dvc, "repro", "repository")
    lock = (project / "dvc.lock").read_bytes()
    (project / "models" / "broken.onnx").write_bytes((project / "models" / "tiny.onnx").read_bytes()[:300])
    (project / "params.yaml").write_text(compose([*BASE[:2], "model.path=models/broken.onnx"], project / "conf"))
    res = sh(project, *dvc, "repro", "repository", check=False)
    assert res.returncode != 0
    assert "truncated or corrupt" in res.stderr + res.stdout
    assert (project / "dvc.lock").read_bytes() == lock
    tmp_left = list((project / "artifacts").rglob("*.tmp*"))
    assert tmp_left == []
