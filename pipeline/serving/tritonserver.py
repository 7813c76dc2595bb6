"""The real ``tritonserver`` from the nvidia-pytriton wheel: locate, validate, serve.

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
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.atomic import atomic_path
from pipeline.core.errors import ToolError

MISSING_ORT_BACKEND = "unable to find backend library for backend 'onnxruntime'"
_ERROR_LINE = re.compile(r"^E\d{4} |error|failed|unable", re.IGNORECASE)


@dataclass(frozen=True)
class TritonInstall:
    """Paths of the tritonserver distribution inside the nvidia-pytriton wheel."""

    binary: Path
    libs: Path  # nvidia_pytriton.libs
    python_backend: Path  # pytriton/tritonserver/backends/python
    stub: Path  # python_backend_stubs/<X.Y>/triton_python_backend_stub


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
                fix=f"reinstall with `pip install --no-deps --force-reinstall nvidia-pytriton==0.7.0` "
                f"(the stub must exist for Python {version})",
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
    root = os.environ.get("PIPELINE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "model-pipeline"
    )
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


def error_lines(log: str, limit: int = 20) -> list[str]:
    """The server log lines that explain a failure (Triton prefixes errors with ``E<mmdd>``)."""
    lines = [ln.strip() for ln in log.splitlines() if _ERROR_LINE.search(ln) and not any(b in ln for b in _BENIGN)]
    return lines[-limit:]


# Lines a CPU-only machine always logs; they say nothing about the repository.
_BENIGN = ("CudaDriverHelper has not been initialized", "Unable to allocate pinned system memory")


def _validation_errors(log: str) -> list[str]:
    """Error-level lines (``E<mmdd>`` or ``error:``) minus the ones every CPU run logs."""
    out = []
    for ln in log.splitlines():
        ln = ln.strip()
        if not (re.match(r"^E\d{4} ", ln) or ln.startswith("error:")):
            continue
        if any(b in ln for b in _BENIGN):
            continue
        out.append(ln)
    return out


# ---------------------------------------------------------------- validation
@dataclass
class ValidationResult:
    """Outcome of starting the real server on a repository with strict config checks."""

    config_name: str | None
    returncode: int | None
    only_missing_backend: bool  # the config parsed and validated; only the ORT backend library is absent
    errors: list[str] = field(default_factory=list)  # error lines other than the missing backend
    log: str = ""

    @property
    def ok(self) -> bool:
        """True when Triton accepted the config (on CPU: failed only for the missing backend)."""
        return self.only_missing_backend and not self.errors


def validate_repository(
    repo_dir: str | os.PathLike[str], config_name: str | None = None, timeout_s: float = 60.0
) -> ValidationResult:
    """Start tritonserver with strict config checks on ``repo_dir`` and classify its errors.

    A valid onnxruntime config fails here only at ``unable to find backend library for
    backend 'onnxruntime'``; anything else (e.g. ``'max_batch_size' must be non-negative``)
    is a real config error and is returned in ``errors`` with the log.

    Raises:
        ToolError: tritonserver is missing, or did not exit within ``timeout_s``.
    """
    inst = locate_tritonserver()
    cmd = [
        str(inst.binary),
        f"--model-repository={Path(repo_dir).resolve()}",
        "--strict-model-config=true",
        "--exit-on-error=true",
        f"--backend-directory={backend_dir(inst)}",
        # Validation must not bind the default ports other servers may hold.
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
    ]
    if config_name:
        cmd.append(f"--model-config-name={config_name}")
    proc = subprocess.Popen(
        cmd, env=server_env(inst), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        log, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        from pipeline.serving.process import kill_group

        kill_group(proc)
        log = proc.communicate()[0] or ""
        raise ToolError(
            f"tritonserver did not exit within {timeout_s:.0f} s while validating {repo_dir}",
            fix="a valid repository makes the server exit at the missing onnxruntime backend; check the log",
            details={"command": " ".join(cmd), "log": "\n".join(log.splitlines()[-20:])},
        ) from None
    missing = MISSING_ORT_BACKEND in log
    real = [ln for ln in _validation_errors(log) if MISSING_ORT_BACKEND not in ln]
    if missing:  # the server's closing summary of that same failure
        real = [ln for ln in real if "failed to load all models" not in ln]
    return ValidationResult(config_name, proc.returncode, missing, real, log)


def __getattr__(name: str) -> object:
    """``EmbeddedServer`` lives in :mod:`pipeline.serving.process` (kept apart for size)."""
    if name in ("EmbeddedServer", "free_port", "port_free", "set_pdeathsig"):
        from pipeline.serving import process as triton_process

        return getattr(triton_process, name)
    raise AttributeError(name)
