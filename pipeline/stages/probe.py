"""probe stage: record what lies outside DVC's view, as JSON with no timestamps.

Runs on every ``dvc repro`` (``always_changed: true``) and writes five records:
- ``--out``: this machine's GPUs, driver, CUDA and TensorRT versions. The engine stages depend
  on it, so on another GPU or TensorRT DVC can neither keep nor restore from its run-cache an
  engine built elsewhere.
- ``--model-record`` and ``--data-record``: content fingerprints of the files the model config
  names (checkpoint, ONNX file, the factory's and the data hook's code; see
  :mod:`pipeline.core.sources`). Export and parity depend on them, so a retrained checkpoint
  or an edited model module reruns them even though no param changed.
- ``--tokenizer-record``: the tokenizer file's fingerprint; the repository (the text endpoint ships a copy) depends on it.
- ``--host-record``: CPU model, cores, memory, GPUs and runtime versions (:mod:`pipeline.core.host`). The
  bench depends on it, so another machine measures itself instead of keeping a benchmark taken elsewhere.

Unchanged inputs give byte-identical records, so nothing downstream reruns.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import exit_with
from pipeline.core import atomic, sources
from pipeline.core.host import host_record
from pipeline.core.config import load_config
from pipeline.engines.probe import probe_machine, sm_tag
from pipeline.core.stage import main as stage_main


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="machine probe JSON to write")
    p.add_argument("--model-record", required=True, type=Path, help="fingerprint of the model's source files")
    p.add_argument("--data-record", required=True, type=Path, help="fingerprint of the sample-data sources")
    p.add_argument("--tokenizer-record", type=Path, help="fingerprint of the text endpoint's tokenizer file (the repository depends on it)")
    p.add_argument("--host-record", type=Path, help="what kind of machine this is (the bench depends on it)")


def _body(a: argparse.Namespace) -> None:
    cfg = load_config(a.params)
    recs = sources.records(cfg.model, Path.cwd().resolve())
    info = probe_machine()
    atomic.write_json(a.out, info)
    atomic.write_text(a.model_record, recs["model"])
    atomic.write_text(a.data_record, recs["data"])
    if a.tokenizer_record is not None:
        atomic.write_text(a.tokenizer_record, recs["tokenizer"])
    if a.host_record is not None:
        atomic.write_text(a.host_record, sources.render(host_record([str(g["name"]) for g in info["gpus"]])))
    gpus = ", ".join(f"{g['name']} ({sm_tag(str(g['compute_capability']))})" for g in info["gpus"]) or "none"
    trt = info["tensorrt"]["version"] if info["tensorrt"]["available"] else "not importable"
    print(f"[probe] GPUs: {gpus}; TensorRT: {trt}; model and data sources fingerprinted")


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m pipeline.stages.probe --params params.yaml --out ... --model-record ... --data-record ...``."""
    return stage_main("probe", __doc__, _args, _body, argv)


if __name__ == "__main__":
    exit_with(main)
