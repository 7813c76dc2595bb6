"""int8 stage: INT8 with ONNX Runtime's quantization tooling, calibrated on real samples, with automatic FP32 fallback."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.convert.int8 import headline, run_int8
from pipeline.core import atomic, optional
from pipeline.core.config import load_config
from pipeline.core.stage import add_report_args, main as stage_main, write_report


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--onnx", required=True, type=Path, help="FP32 ONNX to quantize")
    p.add_argument("--calibration", required=True, type=Path, help="the calibration set (the calibrate stage's samples.json)")
    p.add_argument("--out", required=True, type=Path, help="INT8 ONNX to write")
    add_report_args(p)


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    with optional.best_effort("int8", "int8", a, cfg.int8_in_fleet, "int8_in_fleet"):
        optional.require(a.calibration, "the calibration set")
        with atomic.atomic_path(a.out) as tmp:
            report = run_int8(a.onnx, a.calibration, tmp, cfg)
        write_report(a, report.to_json(), headline(report))
        c, fb = report.calibration, report.fallback
        print(
            f"[int8] {report.mode} {report.format}, {report.size_bytes_fp32 / 1e6:.1f} MB -> {report.size_bytes_int8 / 1e6:.1f} MB; "
            f"{report.quantized_count} nodes INT8, {report.kept_fp32_count} kept FP32; calibration {c.method} on {c.rows} rows, "
            f"fitted on {c.fitted_on}"
        )
        if (sm := report.smoothing) is not None:
            print(
                f"[int8]   smoothing alpha {sm.alpha} ({sm.tensors} tensors, {sm.nodes} nodes): {'used' if sm.used else 'not used'}, "
                f"stop-rule margin {', '.join(f'{g} {m:+.4f}' for g, m in sm.margin.items())}"
            )
        for b in fb.blocked_nodes:
            print(f"[int8]   kept FP32: {b.node} ({b.op}) {b.reason}")
        for attempt in fb.attempts:
            checks = "; ".join(f"{k} search {x.search:.4f} (credited {x.credited:.4f}), validation {x.validation:.4f} (>= {x.threshold:g})" for k, x in attempt.checks.items())
            print(
                f"[int8]   attempt {attempt.attempt} ({attempt.graph}): {attempt.kept_fp32} kept FP32, {'passes' if attempt.passed else 'fails'} the stop rule "
                f"(margin {attempt.margin:+.4f}; {checks or 'no judged outputs: set model.output_kinds'}), {attempt.seconds:.0f} s"
            )
        if not fb.searched:
            print(f"[int8]   fallback search not run: {fb.not_searched}")
        if report.passed_on_calibration is False:
            print(
                f"[int8] no attempt passes the stop rule on the calibration rows; written: attempt {fb.chosen_attempt}, the "
                "closest; the parity stage judges it on the held-out rows"
            )


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.int8 --params ... --onnx ... --calibration ... --out ... --report ... [--metrics ...]``."""
    return stage_main("int8", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
