"""What every stage entry point shares: argument parsing, one-message failures, timing."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline.core import atomic
from pipeline.core.errors import PipelineError, print_error


def parser(stage: str, doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the ``--params`` option every stage takes."""
    p = argparse.ArgumentParser(prog=f"python -m pipeline.stages.{stage}", description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--params", default="params.yaml", help="composed config (python -m pipeline.params writes it)")
    return p


def add_report_args(p: argparse.ArgumentParser) -> None:
    """``--report`` (the full JSON report) and ``--metrics`` (its headline numbers, for dvc metrics)."""
    p.add_argument("--report", required=True, type=Path, help="full JSON report to write")
    p.add_argument("--metrics", type=Path, help="headline numbers to write (dvc metrics; small, committed)")


def write_report(args: argparse.Namespace, report: dict[str, Any], headline: dict[str, Any]) -> None:
    """Write the full report, then its headline as the metrics file when ``--metrics`` was given.

    The metrics stay a handful of numbers so `dvc metrics show/diff` and `dvc exp show` stay readable;
    details (node lists, per-sample errors, logs) live in the report.
    """
    atomic.write_json(args.report, report)
    if args.metrics is not None:
        atomic.write_json(args.metrics, headline)


def run(stage: str, body: Callable[[argparse.Namespace], object], args: argparse.Namespace) -> int:
    """Run ``body(args)``; print a single clear message and return non-zero on a PipelineError."""
    t0 = time.perf_counter()
    try:
        body(args)
    except PipelineError as e:
        print(file=sys.stderr)  # the stage's own progress lines may end without a newline
        return print_error(e, stage)
    except KeyboardInterrupt:
        print(f"\nERROR [{stage}] interrupted", file=sys.stderr)
        return 130
    print(f"[{stage}] done in {time.perf_counter() - t0:.1f} s")
    return 0


def main(stage: str, doc: str | None, add_args: Callable[[argparse.ArgumentParser], None], body: Callable[[argparse.Namespace], object], argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with the stage's own arguments, then :func:`run`."""
    p = parser(stage, doc)
    add_args(p)
    return run(stage, body, p.parse_args(argv))
