"""The layout holds: one package per subsystem, dependencies one way, core depends on nothing else, records on core alone.

Inside a package split into sub-packages (bench, core, release once split) the parts depend one way too.
Reads every module's imports with ``ast`` (tests/helpers/imports.py; function-level imports included: a lazy import is
still a dependency), so a cycle cannot hide behind an import inside a function.
"""

from __future__ import annotations

import ast
import functools
import importlib
import subprocess
import sys

import pytest

from tests.helpers.imports import PKG, ROOT, module_name, pipeline_imports

SUBSYSTEMS = ["core", "records", "stats", "models", "convert", "parity", "engines", "repository", "serving", "bench", "choose", "tune", "release", "stages"]

MODULES = {module_name(p) for p in PKG.rglob("*.py")}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the pipeline modules it imports. Built when a test asks (not at collection: every xdist worker collects)."""
    return {module_name(p): pipeline_imports(p) - {module_name(p), "pipeline"} for p in PKG.rglob("*.py")}


# Packages split into sub-packages (bench/{measure,rounds,...}, core/config, ...): their parts depend one way too.
SPLIT = sorted(module_name(d / "__init__.py") for d in PKG.rglob("*") if d != PKG and (d / "__init__.py").is_file() and any((c / "__init__.py").is_file() for c in d.iterdir()))


def package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and mod in {f"pipeline.{s}" for s in SUBSYSTEMS}) else "top"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_subsystems_import_on_a_cpu_machine() -> None:
    """`import pipeline.engines, pipeline.serving, pipeline.bench` works without TensorRT or a GPU."""
    code = "import " + ", ".join(f"pipeline.{s}" for s in SUBSYSTEMS) + "; import sys; assert 'tensorrt' not in sys.modules"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_no_module_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_package_import_cycles() -> None:
    pkg_graph: dict[str, set[str]] = {}
    for mod, deps in import_graph().items():
        pkg_graph.setdefault(package(mod), set()).update(package(d) for d in deps if package(d) != package(mod))
    assert cycles(pkg_graph) == [], {p: sorted(d) for p, d in pkg_graph.items()}


def test_core_imports_nothing_from_the_other_packages() -> None:
    bad = {m: sorted(d for d in deps if package(d) != "core") for m, deps in import_graph().items() if package(m) == "core"}
    assert {m: d for m, d in bad.items() if d} == {}


def test_records_import_only_core() -> None:
    """The typed records stages exchange (pipeline.records) depend on pipeline.core alone, so any stage may read any record."""
    bad = {m: sorted(d for d in deps if package(d) not in {"core", "records"}) for m, deps in import_graph().items() if package(m) == "records"}
    assert {m: d for m, d in bad.items() if d} == {}


def parts_graph(pkg: str, imports: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Imports between the direct parts of ``pkg`` (each sub-package, and each module beside them, is one node)."""

    def part(mod: str) -> str | None:
        return mod[len(pkg) + 1 :].split(".")[0] if mod.startswith(pkg + ".") else None

    out: dict[str, set[str]] = {}
    for mod, deps in (import_graph() if imports is None else imports).items():
        if (a := part(mod)) is not None:
            out.setdefault(a, set()).update(b for b in map(part, deps) if b is not None and b != a)
    return out


def test_the_split_packages_are_found() -> None:
    assert {"pipeline.bench", "pipeline.core"} <= set(SPLIT), SPLIT


@pytest.mark.parametrize("pkg", SPLIT)
def test_no_import_cycles_among_subpackages(pkg: str) -> None:
    graph = parts_graph(pkg)
    assert cycles(graph) == [], {p: sorted(d) for p, d in graph.items()}


def test_the_cycle_check_sees_a_cycle_between_parts() -> None:
    """parts_graph folds modules into their sub-package, so two modules importing across two sub-packages are a cycle."""
    assert cycles(parts_graph("pipeline.bench")) == []
    back = import_graph() | {"pipeline.bench.measure.sweep": import_graph()["pipeline.bench.measure.sweep"] | {"pipeline.bench.report.render"}}
    assert any({"measure", "report"} <= set(c) for c in cycles(parts_graph("pipeline.bench", back)))


def test_stages_are_thin() -> None:
    """A stage module parses arguments and calls its package: no logic of its own beyond printing."""
    for path in (PKG / "stages").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert set(funcs) <= {"_args", "_body", "main"}, f"{path.name} defines {funcs}"
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 80, path.name


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module: str) -> None:
    if module.endswith(("python_standin", "text_model")):
        pytest.skip("runs inside Triton's python-backend stub, which provides triton_python_backend_utils")
    importlib.import_module(module)


# tests/ beside the packages' own folders: harness code, data files, the fake TensorRT, the GPU-only tests
NOT_PACKAGES = {"helpers", "data", "fakes", "gpu"}


def test_tests_mirror_the_packages() -> None:
    """Every folder of tests/ is a package of pipeline/ (or harness), with an __init__.py so test modules in
    different folders may share a name; every test module sits in one of them or at the top for the whole."""
    tests = ROOT / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - NOT_PACKAGES <= set(SUBSYSTEMS), f"test folders with no package: {sorted(folders - NOT_PACKAGES - set(SUBSYSTEMS))}"
    assert not [f for f in sorted(folders - {"data"}) if not (tests / f / "__init__.py").is_file()]
    assert sorted((folders - NOT_PACKAGES)) == sorted(f for f in folders - NOT_PACKAGES if any((tests / f).glob("test_*.py")))
