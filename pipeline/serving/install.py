"""The ``tritonserver`` distribution in the nvidia-pytriton wheel: where it is, how to run it, how to read its log.

The bottom of :mod:`pipeline.serving`: it imports nothing from the other serving modules.
:mod:`~pipeline.serving.process` starts and supervises a server with what is found here and
:mod:`~pipeline.serving.tritonserver` validates a repository with both.

The wheel ships the server binary, its shared libraries (``nvidia_pytriton.libs``),
the python backend and one python-backend stub per Python version. It has no
onnxruntime or tensorrt backend. To run it here we:

- put ``nvidia_pytriton.libs`` on ``LD_LIBRARY_PATH`` (the server, the python backend
  and the stub all link against its bundled libraries);
- build a backend directory ``<cache>/backends/python/`` holding ``libtriton_python.so``,
  ``triton_python_backend_utils.py`` (imported by every python model) and the stub for
  the running Python (``python_backend_stubs/<X.Y>/triton_python_backend_stub``), which
  is what pytriton itself does;
- put our site-packages on ``PYTHONPATH`` so the stub (linked to the system
  libpython of the same X.Y) imports numpy and onnxruntime from our environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.atomic import atomic_path
from pipeline.core.errors import ToolError

_ERROR_LINE = re.compile(r"^E\d{4} |error|failed|unable", re.IGNORECASE)


@dataclass(frozen=True)
class TritonInstall:
    """Paths of the tritonserver distribution inside the nvidia-pytriton wheel."""

    binary: Path
    libs: Path  # nvidia_pytriton.libs
    python_backend: Path  # pytriton/tritonserver/backends/python
    stub: Path  # python_backend_stubs/<X.Y>/triton_python_backend_stub

    @property
    def caches(self) -> Path:
        """--cache-directory: the wheel's cache implementations (local/libtritoncache_local.so)."""
        return self.binary.parent.parent / "caches"


def site_packages() -> list[Path]:
    """Site-packages directories of the running interpreter (venv first)."""
    paths = [Path(sysconfig.get_paths()["purelib"])]
    with contextlib.suppress(AttributeError):
        paths += [Path(p) for p in site.getsitepackages()]
    return list(dict.fromkeys(p for p in paths if p.is_dir()))


def locate_tritonserver() -> TritonInstall:
    """Find tritonserver, its libs, the python backend and the stub for this Python.

    Raises:
        ToolError: the nvidia-pytriton package or a needed file is missing.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for sp in site_packages():
        dist = sp / "pytriton" / "tritonserver"
        if not (dist / "bin" / "tritonserver").is_file():
            continue
        inst = TritonInstall(
            binary=dist / "bin" / "tritonserver",
            libs=sp / "nvidia_pytriton.libs",
            python_backend=dist / "backends" / "python",
            stub=dist / "python_backend_stubs" / version / "triton_python_backend_stub",
        )
        missing = [str(p) for p in (inst.libs, inst.python_backend / "libtriton_python.so", inst.stub) if not p.exists()]
        if missing:
            raise ToolError(
                "the nvidia-pytriton install is incomplete: tritonserver found but parts it needs are missing",
                fix=f"reinstall with `pip install --no-deps --force-reinstall nvidia-pytriton==0.7.0` (the stub must exist for Python {version})",
                details={"missing": ", ".join(missing)},
            )
        return inst
    raise ToolError(
        "tritonserver not found: the nvidia-pytriton package is not installed in this environment",
        fix="install the project's setup (pip install --no-deps nvidia-pytriton==0.7.0), or use bench.server=external",
        details={"searched": ", ".join(map(str, site_packages()))},
    )


def cache_dir() -> Path:
    """Project-owned cache for run-time files (backend dir, library links)."""
    root = os.environ.get("PIPELINE_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "model-pipeline")
    return Path(root)


def backend_dir(inst: TritonInstall, root: Path | None = None) -> Path:
    """A ``--backend-directory`` whose ``python/`` holds the backend and this Python's stub.

    Built once per (wheel path, Python version) and reused; the build is atomic so two
    processes creating it at once both end with a complete directory.
    """
    # hash() is salted per process; a stable digest lets every run reuse the same directory.
    key = hashlib.sha256(f"{inst.binary}|{inst.stub}".encode()).hexdigest()[:10]
    out = (root or cache_dir()) / f"triton-backends-py{sys.version_info.major}{sys.version_info.minor}-{key}"
    stub = out / "python" / "triton_python_backend_stub"
    if stub.is_file() and stub.stat().st_size == inst.stub.stat().st_size:
        return out
    with atomic_path(out) as tmp:
        shutil.copytree(inst.python_backend, tmp / "python", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(inst.stub, tmp / "python" / "triton_python_backend_stub")
    return out


def server_env(inst: TritonInstall) -> dict[str, str]:
    """Environment for tritonserver and the python-backend stubs it spawns."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(inst.libs), env.get("LD_LIBRARY_PATH")]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*map(str, site_packages()), env.get("PYTHONPATH")]))
    # One ORT/OpenMP pool per session is set by the model config; stop numpy's BLAS from adding its own.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


# ---------------------------------------------------------------- reading its log
# Lines a CPU-only machine always logs; they say nothing about the repository.
_BENIGN = ("CudaDriverHelper has not been initialized", "Unable to allocate pinned system memory")


def error_lines(log: str, limit: int = 20) -> list[str]:
    """The server log lines that explain a failure, loosely matched (for a failed start's message)."""
    lines = [ln.strip() for ln in log.splitlines() if _ERROR_LINE.search(ln) and not any(b in ln for b in _BENIGN)]
    return lines[-limit:]


def error_level_lines(log: str) -> list[str]:
    """Error-level lines only (Triton's ``E<mmdd>`` prefix, or ``error:``), minus the ones every CPU run logs."""
    out = []
    for ln in log.splitlines():
        ln = ln.strip()
        if (re.match(r"^E\d{4} ", ln) or ln.startswith("error:")) and not any(b in ln for b in _BENIGN):
            out.append(ln)
    return out
