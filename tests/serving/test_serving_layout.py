"""The serving package's shape: dependencies one way, and the stub-side stand-in standing alone.

Read with ``ast``, like tests/test_architecture.py, so a function-level import counts too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pipeline.stats.ort import ORT_LEVEL_NAME
from tests.helpers.project import ROOT

SERVING = ROOT / "pipeline" / "serving"

# Who may import whom inside pipeline.serving: install and client at the bottom, validation on top.
ALLOWED = {
    "install": set(),
    "client": set(),
    "process": {"install", "client", "native_backend"},  # ort_standin: the native backend as onnxruntime
    "tritonserver": {"install", "process"},
    "native_backend": {"install"},
    "perf_analyzer": {"install", "process"},
    "embedded": {"install", "native_backend"},
    "python_standin": set(),
    "memory": set(),  # the server's RSS (psutil)
    "loadgen": {"client"},  # the open-loop client (request building)
    "torchserve": set(),  # TorchServe's install, Java, archives, config (bench.peers)
    "torchserve_process": {"process", "torchserve"},  # a running TorchServe, guarded as tritonserver is
    "torchserve_handler": set(),  # runs inside TorchServe's Python worker
}


def imports(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def serving_deps(path: Path) -> set[str]:
    mods = {p.stem for p in SERVING.glob("*.py")}
    return {m.split(".")[2] for m in imports(path) if m.startswith("pipeline.serving.") and m.split(".")[2] in mods}


def test_every_serving_module_is_placed() -> None:
    assert {p.stem for p in SERVING.glob("*.py")} - {"__init__"} == set(ALLOWED)


def test_serving_dependencies_run_one_way() -> None:
    got = {p.stem: serving_deps(p) for p in SERVING.glob("*.py") if p.stem != "__init__"}
    assert {m: sorted(d - ALLOWED[m]) for m, d in got.items() if d - ALLOWED[m]} == {}


def test_no_module_getattr_bridges() -> None:
    """A module ``__getattr__`` hid the process <-> tritonserver cycle; no serving module needs one now."""
    for path in SERVING.glob("*.py"):
        top = ast.parse(path.read_text(encoding="utf-8")).body
        assert not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in top), path.name


def test_python_standin_imports_nothing_from_the_package() -> None:
    """It runs inside Triton's python-backend stub, where ``pipeline`` is not importable."""
    mods = imports(SERVING / "python_standin.py")
    assert not [m for m in mods if m == "pipeline" or m.startswith("pipeline.")]
    assert {m.split(".")[0] for m in mods} <= {"__future__", "json", "os", "sys", "time", "numpy", "onnxruntime", "triton_python_backend_utils"}


def test_torchserve_handler_imports_nothing_from_the_package() -> None:
    """It runs inside TorchServe's Python worker from the .mar; only the model's own factory (native) is imported there."""
    mods = imports(SERVING / "torchserve_handler.py")
    assert not [m for m in mods if m == "pipeline" or m.startswith("pipeline.")]
    assert {m.split(".")[0] for m in mods} <= {"__future__", "collections", "typing", "json", "os", "numpy", "onnxruntime", "torch", "hydra", "safetensors"}


def test_standin_graph_level_tables_agree_with_the_repository_table() -> None:
    """python_standin.py and native/pipeline_ort repeat pipeline/repository/config.py's ORT level table."""
    tree = ast.parse((SERVING / "python_standin.py").read_text(encoding="utf-8"))
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_GRAPH_LEVELS" for t in n.targets))
    assert isinstance(table, ast.Dict)
    python = {ast.literal_eval(k): v.attr for k, v in zip(table.keys, table.values)}  # type: ignore[union-attr]
    assert python == ORT_LEVEL_NAME

    cc = (ROOT / "native" / "pipeline_ort" / "pipeline_ort.cc").read_text(encoding="utf-8")
    body = re.search(r"GraphOptimizationLevel graph_level\(int level\) \{(.*?)\n\}", cc, re.S)
    assert body, "graph_level() not found in pipeline_ort.cc"
    native = {int(k): v for k, v in re.findall(r"case (-?\d+): return (\w+);", body.group(1))}
    default = re.search(r"default: return (\w+);", body.group(1))
    assert default and {**native, 0: default.group(1)} == ORT_LEVEL_NAME


def test_a_ctrl_c_inside_gevents_hub_prints_no_traceback(capsys) -> None:
    """tritonclient.http runs on gevent; a Ctrl-C landing in its hub printed a traceback and a timestamp before the
    one "interrupted" line (seen in the canary's SIGINT test). Other errors are still printed."""
    import sys

    from gevent.hub import get_hub

    from pipeline.serving.client import _quiet_gevent_interrupts

    _quiet_gevent_interrupts()
    hub = get_hub()
    hub.exception_stream = sys.stderr
    hub.print_exception(None, KeyboardInterrupt, KeyboardInterrupt(), None)
    assert capsys.readouterr().err == ""
    hub.print_exception(None, ValueError, ValueError("boom"), None)
    assert "ValueError: boom" in capsys.readouterr().err
