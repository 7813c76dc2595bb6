"""probe stage: record this machine's GPUs, driver, CUDA and TensorRT versions as JSON.

Runs on every ``dvc repro`` (``always_changed: true``). The JSON has no timestamps, so
on the same machine it hashes the same and the engine stages that depend on it stay
up to date; on a machine with another GPU or TensorRT it changes, and DVC can neither
keep nor restore from its run-cache an engine built elsewhere.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.core import atomic
from pipeline.core.gpu import probe_machine
from pipeline.core.stage import main as stage_main


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="probe JSON to write")


def _body(a: argparse.Namespace) -> None:
    info = probe_machine()
    atomic.write_json(a.out, info)
    gpus = ", ".join(f"{g['name']} (sm{str(g['compute_capability']).replace('.', '')})" for g in info["gpus"]) or "none"
    trt = info["tensorrt"]["version"] if info["tensorrt"]["available"] else "not importable"
    print(f"[probe] GPUs: {gpus}; TensorRT: {trt}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m pipeline.stages.probe --out artifacts/machine/probe.json``."""
    return stage_main("probe", __doc__, _args, _body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
