"""What kind of machine this is, for the bench stage to depend on: CPU, cores, memory, accelerators, runtimes.

The always-run probe stage writes it with no timestamps and no load figures, so it hashes the same on the
same machine. The bench depends on it: a clone on another machine (or a runner with another CPU or core
budget) measures its own numbers instead of keeping a benchmark taken elsewhere, while a rerun on the same
machine keeps the last one.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
from pathlib import Path
from typing import Any

# What decides the numbers besides the hardware: the runtime, the server and the client that measures.
_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "tritonclient", "nvidia-pytriton")


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cores_available() -> int:
    """Cores this process may use (affinity): what a 2-core CI runner and a 64-core box differ in."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def memory_gib() -> float | None:
    """Total memory, rounded to 1 GiB so that the kernel's own reservations do not change the record."""
    meminfo = Path("/proc/meminfo")
    if not meminfo.is_file():
        return None
    for line in meminfo.read_text(encoding="utf-8").splitlines():
        if line.startswith("MemTotal:"):
            return float(round(int(line.split()[1]) / 2**20))
    return None


def host_record(gpus: list[str]) -> dict[str, Any]:
    """The machine a benchmark describes; ``gpus`` are the GPU names the machine probe found."""
    versions = {}
    for dist in _DISTRIBUTIONS:
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return {
        "record": "host",
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cores_available": cores_available(),
        "memory_gib": memory_gib(),
        "system": f"{platform.system()} {platform.machine()}",
        "gpus": sorted(gpus),
        "versions": versions,
    }
