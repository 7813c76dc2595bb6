"""Ensemble against BLS for the text endpoint, measured side by side in one tritonserver.

    python scripts/compare_text_designs.py artifacts/model_repository --rounds 4

The shipped design (``<model>_text``, BLS: tokenize the dynamic batch, pad it to its longest row, call the model once)
against the other one Triton's tutorials use: an ensemble of a python tokenizer model and the ONNX model. The
ensemble's tokenizer pads every row to ``max_length``: the ONNX model's dynamic batcher merges only requests of one
shape. Both serve the same ONNX model in one server (the variant given by ``--variant``); perf_analyzer sends the
real sentences; rounds alternate the order. Prints, per design, c=1 p50 and throughput at ``--concurrency`` per round,
and the ensemble/BLS ratios as medians with 90% bootstrap intervals.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.samples import read_sentences
from pipeline.repository import config as triton_config
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.process import EmbeddedServer
from pipeline.stats.estimate import estimate

ROOT = Path(__file__).resolve().parents[1]

TOKENIZER_PY = """
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.max_length = int(config["parameters"]["max_length"]["string_value"])
        self.tok = Tokenizer.from_file(os.path.join(args["model_repository"], args["model_version"], "tokenizer.json"))
        pad = self.tok.padding
        self.tok.enable_padding(pad_id=pad["pad_id"] if pad else 0, pad_token=pad["pad_token"] if pad else "[PAD]", length=self.max_length)
        self.tok.enable_truncation(self.max_length)

    def execute(self, requests):
        out = []
        for request in requests:
            rows = [bytes(v).decode("utf-8") for v in pb_utils.get_input_tensor_by_name(request, "text").as_numpy().reshape(-1)]
            enc = self.tok.encode_batch(rows)
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]))
        return out
"""


def build(repository: Path, model: str, variant: str, out: Path) -> tuple[str, str]:
    """Copy the shipped model and its text endpoint into ``out``, add the ensemble beside them; return both names."""
    text = f"{model}_text"
    for m in (model, text):
        shutil.copytree(repository / m, out / m, ignore=shutil.ignore_patterns("__pycache__"))
    shipped = triton_config.parse(out / text / "configs" / f"{variant}.pbtxt")
    max_length = shipped.parameters["max_length"].string_value
    tok = out / f"{model}_tok"
    (tok / "1").mkdir(parents=True)
    (tok / "1" / "model.py").write_text(TOKENIZER_PY, encoding="utf-8")
    shutil.copyfile(out / text / "1" / "tokenizer.json", tok / "1" / "tokenizer.json")
    cfg = mc.ModelConfig(name=f"{model}_tok", backend="python", max_batch_size=shipped.max_batch_size)
    cfg.input.add(name="text", data_type=mc.TYPE_STRING, dims=[1])
    for name in ("input_ids", "attention_mask"):
        cfg.output.add(name=name, data_type=mc.TYPE_INT64, dims=[-1])
    cfg.instance_group.add(count=shipped.instance_group[0].count, kind=mc.ModelInstanceGroup.KIND_CPU)
    if shipped.HasField("dynamic_batching"):
        cfg.dynamic_batching.CopyFrom(shipped.dynamic_batching)
    cfg.parameters["max_length"].string_value = max_length
    (tok / "config.pbtxt").write_text(text_format.MessageToString(cfg), encoding="utf-8")
    ens = mc.ModelConfig(name=f"{model}_ens", platform="ensemble", max_batch_size=shipped.max_batch_size)
    ens.input.add(name="text", data_type=mc.TYPE_STRING, dims=[1])
    ens.output.add(name="embedding", data_type=shipped.output[0].data_type, dims=list(shipped.output[0].dims))
    s1 = ens.ensemble_scheduling.step.add(model_name=f"{model}_tok", model_version=-1)
    s1.input_map["text"] = "text"
    s1.output_map.update({"input_ids": "ids", "attention_mask": "mask"})
    s2 = ens.ensemble_scheduling.step.add(model_name=model, model_version=-1)
    s2.input_map.update({"input_ids": "ids", "attention_mask": "mask"})
    s2.output_map["embedding"] = "embedding"
    (out / f"{model}_ens" / "1").mkdir(parents=True)
    (out / f"{model}_ens" / "config.pbtxt").write_text(text_format.MessageToString(ens), encoding="utf-8")
    # The extra models have no configs/<variant>.pbtxt: Triton falls back to their config.pbtxt.
    return text, f"{model}_ens"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("repository", type=Path)
    p.add_argument("--model", default="minilm")
    p.add_argument("--variant", default="throughput")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--window-ms", type=int, default=2000)
    p.add_argument("--sentences", type=Path, default=ROOT / "pipeline" / "data" / "sentences.txt")
    a = p.parse_args()
    pa = pa_mod.locate_perf_analyzer()
    with tempfile.TemporaryDirectory(prefix="text-designs-") as tmp_s:
        tmp = Path(tmp_s)
        bls, ens = build(a.repository, a.model, a.variant, tmp / "repo")
        data = tmp / "input.json"
        data.write_text(json.dumps({"data": [{"text": {"content": [s], "shape": [1]}} for s in read_sentences(a.sentences)]}))
        rows: dict[str, dict[str, list[float | None]]] = {d: {"p50": [], "tput": []} for d in (bls, ens)}
        with EmbeddedServer(tmp / "repo", a.model, a.variant, also_load=(bls, f"{a.model}_tok", ens), ort_standin=True, log_dir=tmp / "logs") as srv:
            for r in range(a.rounds):
                for design in (bls, ens) if r % 2 == 0 else (ens, bls):
                    for c, key in ((1, "p50"), (a.concurrency, "tput")):
                        csv = tmp / f"{design}_{c}_{r}.csv"
                        opts = pa_mod.PerfOptions(concurrency=c, measurement_interval_ms=a.window_ms, stability_percentage=50, max_trials=10)
                        run = pa_mod.run(pa, pa_mod.build_command(pa, design, srv.http_url, data, csv, opts), c, csv)
                        value = (run.row["p50_ms"] if key == "p50" else run.row["throughput_infer_s"]) if run.valid else None
                        rows[design][key].append(value)
                        print(f"round {r + 1} {design} c={c}: {value if value is not None else run.reason()}", flush=True)
    for design, m in rows.items():
        print(f"{design}: c=1 p50 ms {estimate(m['p50']).text('.2f', ' ms')}; c={a.concurrency} infer/s {estimate(m['tput']).text('.1f', '/s')}")
    ratio_p50 = [e / b if e and b else None for e, b in zip(rows[ens]["p50"], rows[bls]["p50"])]
    ratio_tput = [e / b if e and b else None for e, b in zip(rows[ens]["tput"], rows[bls]["tput"])]
    print(f"ensemble / BLS, same round: c=1 p50 {estimate(ratio_p50).text()}; c={a.concurrency} throughput {estimate(ratio_tput).text()}")


if __name__ == "__main__":
    main()
