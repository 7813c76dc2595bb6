"""The real `dvc repro` / `dvc exp run` on a copy of this project, with a tiny two-input ONNX model.

Shows: both ways of running agree on params; a second repro is a no-op, also after Python
wrote bytecode; changing only a variant value reruns only the repository stage (never
export/simplify/fp16), and changing it back restores the first run from DVC's run cache; a builder knob of a
target the fleet does not build is no input of any stage;
a bad input fails with one message and leaves dvc.lock unchanged. Each test has its own copy of the project
built once per session (tests/helpers/project.py), so these also show that a copy is as good as the build.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from pipeline.params import compose
from tests.helpers.project import GIT, MODEL_STAGES, TWO, Built, Recipe, sh

BASE = list(TWO.overrides)


@pytest.fixture
def tiny(built: Callable[[Recipe], Built]) -> Built:
    """A git repo holding a copy of the pipeline, configured for a tiny ONNX model, after its first `dvc repro repository`."""
    return built(TWO)


def test_repro_noop_and_variant_change_reruns_only_repository(tiny: Built) -> None:
    """On a copy of the built project: its status is clean, a second repro reruns only the probe (the copy holds DVC's
    cache and state as the build left them) and a variant change reruns only the repository stage."""
    dvc = [sys.executable, "-m", "dvc"]
    project = tiny.path
    for stage in MODEL_STAGES:
        assert f"Running stage '{stage}'" in tiny.first_repro
    assert (project / "artifacts" / "model_repository" / "two" / "configs" / "throughput.pbtxt").is_file()
    # Bytecode is not a code dependency (.dvcignore): a new or rewritten .pyc beside the sources changes nothing.
    stray = project / "pipeline" / "core" / "__pycache__" / "stray.cpython-311.pyc"
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"not the sources")
    # The machine probe is always_changed by design (engines must notice another GPU); nothing else reruns.
    status = sh(project, *dvc, "status", "repository").stdout
    assert status.strip().splitlines() == ["probe:", "\talways changed"] or "up to date" in status, status
    second = sh(project, *dvc, "repro", "repository")
    assert [ln for ln in second.stdout.splitlines() if ln.startswith("Running stage")] == ["Running stage 'probe':"], second.stdout
    assert sh(project, *GIT, "status", "--porcelain").stdout == ""  # the build committed its first run: nothing new

    overrides = [*BASE, "variants.latency.instance_count=3"]
    exp = sh(project, *dvc, "exp", "run", "repository", *[a for o in overrides for a in ("-S", o)])
    ran = {s for s in ("export", "simplify", "fp16", "parity", "engine@cpu", "tune", "repository") if f"Running stage '{s}'" in exp.stdout}
    assert ran == {"repository"}, exp.stdout  # the tune depends on the throughput variant, not the latency one
    # dvc exp run composed conf/ itself: the result equals our composer's output for the same overrides.
    assert (project / "params.yaml").read_text() == compose(overrides, project / "conf")
    latency = (project / "artifacts" / "model_repository" / "two" / "configs" / "latency.pbtxt").read_text()
    assert "count: 3" in latency
    # Back to the built params: the build's run-cache entry (copied with .dvc/cache) restores the repository, as it
    # would in the project that ran it, instead of running the stage again.
    (project / "params.yaml").write_text(compose(BASE, project / "conf"))
    back = sh(project, *dvc, "repro", "repository")
    assert "Stage 'repository' is cached - skipping run, checking out outputs" in back.stdout, back.stdout
    assert "count: 3" not in (project / "artifacts" / "model_repository" / "two" / "configs" / "latency.pbtxt").read_text()
    # The tune reruns on its own knobs and on the throughput variant, never on a bench-only knob.
    for extra, reruns in (("bench.rounds.budget_s=10", False), ("tune.budget_s=100", True), ("variants.throughput.instance_count=2", True)):
        (project / "params.yaml").write_text(compose([*BASE, extra], project / "conf"))
        assert ("tune:" in sh(project, *dvc, "status", "tune").stdout) is reruns, extra
    # The fleet is [cpu]: an a100 builder knob is no input of the repository stage (nor of anything upstream).
    (project / "params.yaml").write_text(compose([*BASE, "target_specs.a100.builder.workspace_mb=1024"], project / "conf"))
    status = sh(project, *dvc, "status", "repository").stdout
    assert "repository" not in status and "export" not in status, status


def test_bad_input_leaves_lock_and_artifacts(tiny: Built) -> None:
    dvc = [sys.executable, "-m", "dvc"]
    project = tiny.path
    sh(project, *dvc, "repro", "repository")
    lock = (project / "dvc.lock").read_bytes()
    whole = (project / "models" / "two.onnx").read_bytes()
    (project / "models" / "broken.onnx").write_bytes(whole[: len(whole) // 2])
    (project / "params.yaml").write_text(compose([*BASE[:2], "model.path=models/broken.onnx"], project / "conf"))
    res = sh(project, *dvc, "repro", "repository", check=False)
    assert res.returncode != 0
    assert "truncated or corrupt" in res.stderr + res.stdout
    assert (project / "dvc.lock").read_bytes() == lock
    tmp_left = list((project / "artifacts").rglob("*.tmp*"))
    assert tmp_left == []
