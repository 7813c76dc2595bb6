"""calibrate stage: the calibration set, real samples from the model's data hook checked against the graph's inputs."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.convert import calibration
from pipeline.core import onnx_tools, optional
from pipeline.core.config import load_config
from pipeline.core.stage import add_report_args, main as stage_main, write_report


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--onnx", required=True, type=Path, help="the FP32 ONNX the samples must fit")
    p.add_argument("--out", required=True, type=Path, help="calibration set to write (Polygraphy JSON)")
    add_report_args(p)


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    with optional.best_effort("calibrate", "calibration set", a, cfg.int8_in_fleet, "int8_in_fleet"):
        graph = onnx_tools.load_model(a.onnx, "FP32 model")
        feeds, info = calibration.build(cfg.model, graph, cfg.int8.calibration, cfg.parity.synthetic_batch_sizes)
        calibration.save(feeds, a.out)
        report = {**info, **calibration.record(a.out)}
        held = report["split"].get("held_out")
        write_report(
            a, report, {**{k: report[k] for k in ("rows", "sha256", "real")}, "held_out_rows": held["rows"] if held else None, "held_out_sha256": held["sha256"] if held else None}
        )
        print(f"[calibrate] {report['rows']} rows in {report['samples']} samples from {report['source']}: {a.out} ({report['bytes'] / 1e3:.0f} kB, sha256 {report['sha256'][:12]})")
        print(
            f"[calibrate] held out for the parity gate: {held['rows']} of {report['rows_available']} rows "
            f"(int8.calibration.holdout={cfg.int8.calibration.holdout}, sha256 {held['sha256'][:12]})"
            if held
            else f"[calibrate] {report['split']['none']}"
        )


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.calibrate --params ... --onnx ... --out ... --report ... [--metrics ...]``."""
    return stage_main("calibrate", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
