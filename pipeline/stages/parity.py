"""parity stage: the reference model against every artifact on real inputs, with Polygraphy; a hard gate.

``--goldens-only`` compares against saved goldens without torch (a GPU CI job, for its own engine).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from pipeline import exit_with
from pipeline.core.config import load_config
from pipeline.core.errors import ParityError
from pipeline.core.stage import add_report_args, main as stage_main, write_report
from pipeline.parity.report import failures, gate
from pipeline.parity.run import headline, print_table, run_parity, text_parity


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fp32", type=Path, help="simplified FP32 ONNX to compare")
    p.add_argument("--fp16", type=Path, help="FP16 ONNX to compare")
    p.add_argument("--int8", type=Path, help="INT8 ONNX to compare")
    p.add_argument("--source-onnx", type=Path, help="exported ONNX: the reference when model.source=onnx")
    p.add_argument("--engines", type=Path, help="directory of <target>/{model.plan,manifest.json} TensorRT engines")
    p.add_argument("--inputs", required=True, type=Path, help="golden inputs (Polygraphy JSON): written, or read with --goldens-only")
    p.add_argument("--reference", required=True, type=Path, help="golden reference outputs (Polygraphy RunResults JSON)")
    add_report_args(p)
    p.add_argument("--sentences", type=Path, help="real sentences, one per line: the text endpoint's parity rows (a model with model.tokenizer)")
    p.add_argument("--goldens-only", action="store_true", help="compare against the saved goldens; do not run (or need) torch")
    p.add_argument("--verbose", action="store_true", help="show Polygraphy's own per-sample log")


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    artifacts = {k: p for k, p in (("fp32", a.fp32), ("fp16", a.fp16), ("int8", a.int8)) if p is not None}
    if not artifacts and a.engines is None:
        raise ParityError("nothing to compare", fix="pass --fp32, --fp16, --int8 and/or --engines")
    report = run_parity(cfg, artifacts, a.inputs, a.reference, a.source_onnx, a.engines, a.goldens_only, a.verbose)
    if cfg.model.tokenizer is not None and a.fp32 is not None and a.sentences is not None:
        text = text_parity(cfg, a.fp32, a.sentences)
        report = dataclasses.replace(report, text_endpoint=text, passed=report.passed and text.passed)
    write_report(a, report.to_json(), headline(report))  # written even on failure: the numbers are what the user needs
    print_table(report)
    for line in failures(report.artifacts, set(report.not_gating)):
        print(f"[parity] not gating (no target serves it as configured; under precision auto, a candidate): {line}")
    gate(report, a.report)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.parity --params ... --fp32 ... --fp16 ... --inputs ... --reference ... --report ...``."""
    return stage_main("parity", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
