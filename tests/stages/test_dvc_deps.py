"""Every module a stage runs is one of its DVC deps, by content.

A stage that imports a file dvc.yaml does not list keeps its old output when that file changes: the stale artifact
the pipeline exists to prevent. This walks each stage's imports (module level and the lazy ones inside functions,
and the packages' ``__init__`` files Python runs on the way) from its ``python -m pipeline.stages.<name>`` entry
point, and checks that a file or folder dep of the stage covers each file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.helpers.imports import ROOT, module_file, pipeline_imports

STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def closure(module: str) -> set[Path]:
    """The files Python runs for ``python -m module``: the module, what it imports, and every parent package."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):
            f = module_file(".".join(parts[:i]))
            if f is not None and f not in seen:
                seen.add(f)
                todo.extend(pipeline_imports(f, runtime_only=True))
    return seen


def stage_runs(name: str) -> tuple[str, list[str]]:
    """The stage's entry module and its deps (a foreach stage's ``do`` template)."""
    body = STAGES[name].get("do", STAGES[name])
    m = re.search(r"python -m (pipeline\.stages\.\w+)", body["cmd"])
    assert m, f"stage {name}: no `python -m pipeline.stages.<name>` in its cmd"
    return m.group(1), [str(d).rstrip("/") for d in body.get("deps", [])]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_module_a_stage_runs_is_a_dep(stage: str) -> None:
    module, deps = stage_runs(stage)
    files = {f.relative_to(ROOT).as_posix() for f in closure(module)}
    missing = sorted(f for f in files if not any(f == d or f.startswith(d + "/") for d in deps))
    assert not missing, f"stage {stage} runs these files but dvc.yaml does not list them as deps: {missing}"


def test_the_walk_sees_lazy_imports_and_parent_packages() -> None:
    files = {f.relative_to(ROOT).as_posix() for f in closure("pipeline.stages.probe")}
    assert {"pipeline/__init__.py", "pipeline/stages/__init__.py", "pipeline/core/sources.py"} <= files
    assert "pipeline/core/images.py" in files  # imported inside a function of sources.py
    assert "pipeline/engines/targets.py" not in files  # trt.py imports it for annotations only (TYPE_CHECKING)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_module_dep_exists_and_is_run(stage: str) -> None:
    """A listed module the stage no longer runs reruns it for nothing (the choose stage once depended on bench files);
    a listed path that is gone fails `dvc repro`. Folders (pipeline/core, pipeline/models: factories loaded by name)
    stay wide on purpose."""
    module, deps = stage_runs(stage)
    files = {f.relative_to(ROOT).as_posix() for f in closure(module)}
    for d in deps:
        if "${" in d or d.startswith("artifacts/"):  # templated, or another stage's output
            continue
        assert (ROOT / d).exists(), f"stage {stage}: dep {d} does not exist"
        if d.startswith("pipeline/") and d.endswith(".py"):
            assert d in files, f"stage {stage}: dep {d} is a module the stage does not run"
