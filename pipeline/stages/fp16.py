"""fp16 stage: FP16 conversion with onnxconverter-common; unsafe nodes stay FP32; NaN/Inf refused."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.convert.fp16 import headline, run_fp16
from pipeline.core import atomic, optional
from pipeline.core.config import load_config
from pipeline.core.stage import add_report_args, main as stage_main, write_report


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--onnx", required=True, type=Path, help="FP32 ONNX to convert")
    p.add_argument("--out", required=True, type=Path, help="FP16 ONNX to write")
    add_report_args(p)


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    with optional.best_effort("fp16", "fp16", a, cfg.fp16_in_fleet, "fp16_in_fleet"):
        with atomic.atomic_path(a.out) as tmp:
            report = run_fp16(a.onnx, tmp, cfg.precision, cfg.model)
        write_report(a, report, headline(report))
        print(
            f"[fp16] {report['size_bytes_fp32'] / 1e6:.1f} MB -> {report['size_bytes_fp16'] / 1e6:.1f} MB, {report['kept_fp32_count']} nodes kept FP32 "
            f"({report['fallback_blocked_count']} by the data-driven fallback)"
        )
        for b in report["fallback"]["blocked_nodes"]:
            what = f"{b['role']} '{b['value']}': " if b["value"] else ""
            print(f"[fp16]   kept FP32: {b['node']} ({b['op']}) {what}{b['reason']}")
        for r in report["ort_rejected"]:
            print(f"[fp16]   kept FP32: {r['node']} (ONNX Runtime refused the FP16 graph there: {r['error'][:160]})")
        for attempt in report["fallback"]["attempts"]:
            c = attempt["cross_check"]
            print(f"[fp16]   attempt {attempt['attempt']}: true-FP16 cross-check {c['status']}" + (f" ({c['error']})" if c.get("error") else ""))


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.fp16 --params ... --onnx ... --out ... --report ... [--metrics ...]``."""
    return stage_main("fp16", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
