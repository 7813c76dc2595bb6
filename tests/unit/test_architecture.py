"""The layout holds: one package per subsystem, dependencies one way, core depends on nothing else.

Reads every module's imports with ``ast`` (function-level imports included: a lazy import is still a
dependency), so a cycle cannot hide behind an import inside a function.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pipeline"
SUBSYSTEMS = ["core", "models", "convert", "parity", "engines", "repository", "serving", "bench", "choose", "release", "stages"]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every ``pipeline.*`` module ``path`` imports, resolved to the module (not the attribute) it names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    known = MODULES
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import submodule` depends on the submodule; `from pkg import name` on pkg itself.
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names]
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n.startswith("pipeline") and n != "pipeline":
                out.add(n)
    return out


MODULES = {module_name(p) for p in PKG.rglob("*.py")}
GRAPH = {module_name(p): imports_of(p) - {module_name(p)} for p in PKG.rglob("*.py")}


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
    assert cycles(GRAPH) == []


def test_no_package_import_cycles() -> None:
    pkg_graph: dict[str, set[str]] = {}
    for mod, deps in GRAPH.items():
        pkg_graph.setdefault(package(mod), set()).update(package(d) for d in deps if package(d) != package(mod))
    assert cycles(pkg_graph) == [], {p: sorted(d) for p, d in pkg_graph.items()}


def test_core_imports_nothing_from_the_other_packages() -> None:
    bad = {m: sorted(d for d in deps if package(d) != "core") for m, deps in GRAPH.items() if package(m) == "core"}
    assert {m: d for m, d in bad.items() if d} == {}


def test_stages_are_thin() -> None:
    """A stage module parses arguments and calls its package: no logic of its own beyond printing."""
    for path in (PKG / "stages").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert set(funcs) <= {"_args", "_body", "main"}, f"{path.name} defines {funcs}"
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 80, path.name


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module: str) -> None:
    if module.endswith("python_standin"):
        pytest.skip("runs inside Triton's python-backend stub, which provides triton_python_backend_utils")
    importlib.import_module(module)
