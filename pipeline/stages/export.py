"""export stage: PyTorch model (or an existing ONNX file) -> checked ONNX with named I/O and a dynamic batch axis."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.convert.export import headline, run_export
from pipeline.core.config import load_config
from pipeline.core.stage import add_report_args, main as stage_main, write_report


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="ONNX file to write")
    add_report_args(p)


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    report = run_export(cfg.model, cfg.export, a.out)
    write_report(a, report, headline(report))
    print(f"[export] {a.out}: {report['nodes']} nodes, opset {report['opset']}, {report['size_bytes'] / 1e6:.1f} MB")


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.export --params params.yaml --out ... --report ... [--metrics ...]``."""
    return stage_main("export", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
