"""engine stage: one GPU target's TensorRT engine and manifest, or a manifest saying why it was skipped."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.core.atomic import read_json
from pipeline.core.config import load_config
from pipeline.core.errors import EngineError
from pipeline.core.stage import main as stage_main
from pipeline.engines.build import build_target
from pipeline.engines.targets import resolve_target


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="target name (a key of target_specs, listed in targets)")
    p.add_argument("--onnx", required=True, type=Path, help="the ONNX of the target's precision (model.<engine_precision.<target>>.onnx)")
    p.add_argument("--probe", required=True, type=Path, help="the probe stage's machine JSON")
    p.add_argument("--out", required=True, type=Path, help="engine directory to write (manifest.json [+ model.plan])")
    p.add_argument("--timing-cache", required=True, type=Path, help="this target's timing cache (read and rewritten)")


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    target = resolve_target(cfg, a.target)
    probe = read_json(a.probe, EngineError, "machine probe", "run the probe stage: dvc repro probe")
    m = build_target(target, a.onnx, probe, a.out, a.timing_cache, cfg.export.batch_axis)
    if m.built:
        assert m.engine is not None
        print(f"[engine@{a.target}] built {m.engine.bytes} bytes ({m.precision} ONNX) in {m.build_time_s} s on {m.machine['gpu_name']}")
    else:
        print(f"[engine@{a.target}] skipped: {m.reason}")


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.engine --params ... --target ... --onnx ... --probe ... --out ... --timing-cache ...``."""
    return stage_main("engine", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
