"""bench stage: perf_analyzer against a real Triton, with an in-process ONNX Runtime baseline (see pipeline/bench)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipeline import exit_with
from pipeline.bench.report import render
from pipeline.bench.run import run_bench
from pipeline.core.atomic import remove_stale, write_json
from pipeline.core.config import load_config
from pipeline.core.errors import BenchError
from pipeline.core.stage import main as stage_main


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repository", required=True, type=Path, help="the shipped model repository root")
    p.add_argument("--out-json", required=True, type=Path, help="bench.json: the full report")
    p.add_argument("--metrics", type=Path, help="the report's summary (dvc metrics)")
    p.add_argument("--out-dir", required=True, type=Path, help="report.md, bench.png, perf logs")
    p.add_argument("--curves-dir", required=True, type=Path, help="<variant>.csv plot data (dvc plots)")
    p.add_argument("--sentences", type=Path, help="real sentences, one per line: the text endpoint's requests (when the repository has one)")
    p.add_argument("--tune", type=Path, help="tune.json: the tune stage's record, shown in the report when it is of the file measured")


def _body(args: argparse.Namespace) -> None:
    cfg = load_config(args.params)
    t0 = time.perf_counter()
    if args.metrics is not None:
        remove_stale(args.metrics)  # never leave the last run's headline beside a failed run
    res = run_bench(cfg, args.repository, args.out_json, args.out_dir, args.curves_dir, args.sentences, args.tune)
    if args.metrics is not None:
        write_json(args.metrics, res.summary())
    print(render.console_line(res, time.perf_counter() - t0))
    errors = [d for d in res.diagnosis if d.severity == "error"]
    for d in res.diagnosis:
        print(f"[bench] {d.severity}: {d.rule} ({d.variant}): {d.message}")
    if errors:
        raise BenchError(
            f"the benchmark found {len(errors)} config error(s); outputs were written for inspection",
            fix=errors[0].fix,
            details={d.rule: d.message for d in errors},
        )


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.bench --params ... --repository ... --out-json ... --out-dir ... --curves-dir ...``."""
    return stage_main("bench", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
