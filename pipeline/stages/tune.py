"""tune stage: search the throughput variant's scheduling by measurement; the repository ships the winner (pipeline/tune)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pipeline import exit_with
from pipeline.core.atomic import remove_stale, write_text
from pipeline.core.config import load_config
from pipeline.core.stage import add_report_args, main as stage_main, write_report
from pipeline.repository.served import from_choice
from pipeline.tune import report
from pipeline.tune.run import run_tune


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--choice", required=True, type=Path, help="choose.json: which precision the throughput variant serves")
    for precision in ("fp32", "fp16", "int8"):
        p.add_argument(f"--{precision}", type=Path, help=f"the {precision} ONNX, searched on if choose.json says the throughput variant serves it")
    p.add_argument("--parity", required=True, type=Path, help="parity.json: refuse to search on a file that did not pass it")
    p.add_argument("--markdown", required=True, type=Path, help="tune.md: every candidate with its interval, and the winner explained")
    add_report_args(p)


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    remove_stale(a.report, a.markdown, *([a.metrics] if a.metrics else []))  # never leave the last winner beside a failed run
    onnx = from_choice(cfg, a.choice, {"fp32": a.fp32, "fp16": a.fp16, "int8": a.int8})
    with tempfile.TemporaryDirectory(prefix="tune-") as work:
        record = run_tune(cfg, onnx, a.parity, Path(work))
    write_text(a.markdown, report.markdown(record))
    write_report(a, record.to_json(), report.headline(record))
    print(report.console(record))


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.tune --params ... --choice ... --fp32 ... --parity ... --report ... --markdown ...``."""
    return stage_main("tune", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
