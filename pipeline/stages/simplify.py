"""simplify stage: onnxsim with its own numerical check; node counts before/after in a JSON report."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.convert.simplify import headline, simplify
from pipeline.core import atomic
from pipeline.core.config import load_config
from pipeline.core.stage import add_report_args, main as stage_main, write_report


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--onnx", required=True, type=Path, help="exported ONNX to simplify")
    p.add_argument("--out", required=True, type=Path, help="simplified FP32 ONNX to write")
    add_report_args(p)


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    with atomic.atomic_path(a.out) as tmp:
        report = simplify(a.onnx, tmp, cfg.simplify, cfg.model)
    write_report(a, report, headline(report))
    print(f"[simplify] nodes {report['nodes_before']} -> {report['nodes_after']}")


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.simplify --params ... --onnx ... --out ... --report ... [--metrics ...]``."""
    return stage_main("simplify", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
