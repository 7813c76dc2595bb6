"""repository stage: a versioned Triton model repository with latency and throughput config variants."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeline import exit_with
from pipeline.core import atomic
from pipeline.core.config import load_config
from pipeline.core.errors import RepositoryError
from pipeline.core.stage import add_report_args, main as stage_main, write_report
from pipeline.repository.served import from_choice, tuned
from pipeline.repository.writer import headline, write_repository


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--choice", type=Path, help="choose.json: which precision each variant serves (with --fp32/--fp16/--int8)")
    for precision in ("fp32", "fp16", "int8"):
        p.add_argument(f"--{precision}", type=Path, help=f"the {precision} ONNX, served if choose.json says so")
    p.add_argument("--onnx", type=Path, help="instead of --choice: one ONNX both variants serve (model.<serving.precision>.onnx)")
    p.add_argument("--out", required=True, type=Path, help="model repository directory to write")
    add_report_args(p)
    p.add_argument("--parity", required=True, type=Path, help="parity.json: refuse to ship a file that did not pass it")
    p.add_argument("--engines", type=Path, help="artifacts/engines: <target>/{manifest.json,model.plan} per GPU target")
    p.add_argument("--tune", type=Path, help="tune.json: the throughput variant ships the tune stage's winner")


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    if (a.choice is None) == (a.onnx is None):
        raise RepositoryError("say what the ONNX Runtime model serves: --choice choose.json with the ONNX files, or --onnx <file>")
    onnx = from_choice(cfg, a.choice, {"fp32": a.fp32, "fp16": a.fp16, "int8": a.int8}) if a.choice else a.onnx
    if a.tune is not None:
        cfg, note = tuned(cfg, a.tune, onnx)
        print(f"[repository] {note}")
    with atomic.atomic_path(a.out) as tmp:
        tmp.mkdir()
        summary = write_repository(cfg, onnx, tmp, a.parity, a.engines)
    write_report(a, summary, headline(summary))
    print(f"[repository] {a.out}/{summary['model']}/{summary['version']} ({summary['precision']}, target {summary['serving_target']})")
    print(json.dumps({"variants": summary["variants"], "default": summary["default_variant"]}))
    for variant, s in summary["served"].items():
        print(f"[repository] variant '{variant}' serves {s['precision']} ({s['file']}): {s['reason']}")
    for key, note in summary["derived"].items():
        print(f"[repository] note: variant '{key}': {note}")
    text = summary["text_endpoint"]
    if text:
        print(f"[repository] text endpoint {text['model']}: text in, tokenized with {text['tokenizer']['source']} (max_length {text['tokenizer']['max_length']})")
    else:
        print("[repository] no text endpoint: model.tokenizer is not set (a text model gets <name>_text by setting it)")
    if summary["engines"] and summary["engines"]["table"]:
        print("[repository] TensorRT targets:\n" + summary["engines"]["table"])


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.stages.repository --params ... --choice ... --fp32 ... --parity ... --out ... --report ...``."""
    return stage_main("repository", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
