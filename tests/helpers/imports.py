"""The ``pipeline`` modules a source file imports, read with ``ast``: one reader for the architecture and DVC-deps tests.

Imports inside functions count (a lazy import is still a dependency). ``runtime_only`` leaves out those under
``if TYPE_CHECKING:``, which never run: the DVC deps need what runs, the architecture what the code names.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pipeline"


def module_name(path: Path) -> str:
    """``pipeline/x/y.py`` -> ``pipeline.x.y``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_file(name: str) -> Path | None:
    """The file behind ``pipeline.x.y`` (package __init__ or module), or None for a name that is no module."""
    p = ROOT.joinpath(*name.split("."))
    return next((f for f in (p / "__init__.py", p.with_suffix(".py")) if f.is_file()), None)


def _nodes(tree: ast.AST, runtime_only: bool) -> list[ast.AST]:
    """Every node of ``tree``; with ``runtime_only``, not those under ``if TYPE_CHECKING:`` (its else branch runs)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if runtime_only and isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _module(name: str) -> str:
    """``name`` resolved to the module it lives in: ``pipeline.a.b.attr`` -> ``pipeline.a.b``."""
    while name and module_file(name) is None:
        name = name.rpartition(".")[0]
    return name


def pipeline_imports(path: Path, runtime_only: bool = False) -> set[str]:
    """Every ``pipeline`` module ``path`` imports, resolved to the module (not the attribute) it names.

    ``from pkg import submodule`` gives ``pkg.submodule``, ``from pkg import name`` gives ``pkg``; the package's own
    ``__init__`` that Python also runs on the way is the caller's to add (see tests/stages/test_dvc_deps.py).
    """
    names: list[str] = []
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8")), runtime_only):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:  # the package uses absolute imports
            names += [f"{node.module}.{a.name}" if module_file(f"{node.module}.{a.name}") else node.module for a in node.names]
    return {_module(n) for n in names if n.split(".")[0] == "pipeline"}
