"""The conditions every number was taken under: CPU, cores this process may use, load, tool versions."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
from dataclasses import asdict, dataclass

from pipeline.bench.measure.results import Json
from pipeline.core.host import cores_available, cpu_model
from pipeline.serving import perf_analyzer as pa_mod


@dataclass
class Machine:
    """CPU, cores, load and tool versions: the conditions every number was taken under."""

    cpu_model: str
    cpu_count: int | None
    cores_available: int
    platform: str
    loadavg_start: list[float]
    versions: dict[str, str]
    loadavg_end: list[float] | None = None

    def to_json(self) -> Json:
        return {k: v for k, v in asdict(self).items() if k != "loadavg_end" or v is not None}


def cpu_budget() -> int:
    """Cores this process may use (affinity), which is what oversubscription is judged against."""
    return cores_available()


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded for the report."""
    return [round(x, 2) for x in os.getloadavg()]


def machine(pa: pa_mod.PerfAnalyzer) -> Machine:
    """CPU, cores, load at start and tool versions (perf_analyzer's from its own ``--version``)."""
    cpu = cpu_model()
    versions = {"python": platform.python_version()}
    for dist in ("onnxruntime", "tritonclient", "nvidia-pytriton", "numpy"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = "absent"
    r = subprocess.run([str(pa.binary), "--version"], env=pa.env(), capture_output=True, text=True, timeout=30)
    words = (r.stdout + r.stderr).strip().removeprefix("Perf Analyzer Version ").split()
    versions["perf_analyzer"] = words[0] if words else "?"
    return Machine(cpu, os.cpu_count(), cpu_budget(), platform.platform(), loadavg(), versions)
