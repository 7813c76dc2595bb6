"""choose stage: which precision the ONNX Runtime model serves per variant (configured, or `auto`: timed here)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.choose.decide import choose, headline
from pipeline.core.config import load_config
from pipeline.core.stage import add_report_args, main as stage_main, write_report


def _args(p: argparse.ArgumentParser) -> None:
    for precision in ("fp32", "fp16", "int8"):
        p.add_argument(f"--{precision}", type=Path, help=f"the {precision} ONNX (a candidate of precision auto)")
    p.add_argument("--parity", required=True, type=Path, help="parity.json: auto only takes candidates that passed it")
    add_report_args(p)


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    report = choose(cfg, {"fp32": a.fp32, "fp16": a.fp16, "int8": a.int8}, a.parity)
    write_report(a, report, headline(report))
    for c, why in report["left_out"].items():
        print(f"[choose] {c} left out: {why}")
    for variant, c in report["variants"].items():
        print(f"[choose] variant '{variant}' serves {c['precision']}: {c['reason']}")


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.choose --params ... --fp32 ... --fp16 ... --int8 ... --parity ... --report ...``."""
    return stage_main("choose", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
