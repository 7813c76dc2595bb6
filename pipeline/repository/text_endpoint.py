"""The text endpoint: ``<model>_text``, a python-backend model that takes text and returns the model's outputs.

Layout (model M, version V), beside the tensor model M:
    <out>/M_text/config.pbtxt              the default variant
    <out>/M_text/configs/{latency,throughput}.pbtxt
    <out>/M_text/V/model.py                pipeline/repository/text_model.py: tokenize the batch, call M (BLS)
    <out>/M_text/V/tokenizer.json          the configured tokenizer, copied and checksummed like the model

Each variant batches as the tensor model's variant of the same name does (max_batch_size, dynamic batching, and
instance count unless ``text_instances`` sets its own), so ``--model-config-name=latency`` serves text and tensors
alike without a queue.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core import atomic
from pipeline.core.config import PipelineConfig, TokenizerConfig, VariantConfig
from pipeline.core.config.files import tokenizer_file
from pipeline.core.errors import RepositoryError
from pipeline.core.specs import IOSpec
from pipeline.repository import config as triton_config

MODEL_PY = Path(__file__).resolve().parent / "text_model.py"
SUFFIX = "_text"
TEXT_INPUT = "text"


@dataclass(frozen=True)
class TextEndpoint:
    """What the repository shipped as the text endpoint (for the report)."""

    model: str
    tokenizer_source: str
    tokenizer_sha256: str
    model_py_sha256: str
    max_length: int
    truncation: bool

    def to_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "tokenizer": {"source": self.tokenizer_source, "sha256": self.tokenizer_sha256, "max_length": self.max_length, "truncation": self.truncation},
            "model_py_sha256": self.model_py_sha256,
        }


def shipped_files(model_dir: Path, version: int | str) -> dict[str, str]:
    """sha256 of a text model's files (bench.json's text_endpoint.files): its version directory's by name, its configs
    by their path in ``model_dir``."""
    out = {p.name: atomic.file_digest(p)[0] for p in sorted((model_dir / str(version)).glob("*")) if p.is_file()}
    return out | {str(p.relative_to(model_dir)): atomic.file_digest(p)[0] for p in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))] if p.is_file()}


def check_tokenizer(tok: TokenizerConfig, path: Path, inputs: list[IOSpec]) -> None:
    """The tokenizer file loads, and it feeds exactly the graph's inputs; raises RepositoryError naming the file or key."""
    from tokenizers import Tokenizer  # lazy: only text models need it

    if not path.is_file():
        fix = "set model.tokenizer.path to the model's tokenizer.json, or model.tokenizer=null"
        raise RepositoryError(f"tokenizer file not found: {path}", fix=fix, details={"model.tokenizer.path": tok.path})
    try:
        Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - the library raises a bare Exception for a malformed file
        raise RepositoryError(
            f"cannot load the tokenizer {path}: {str(e).splitlines()[0][:200]}",
            fix="point model.tokenizer.path at a tokenizers-library tokenizer.json (e.g. the one the model's package ships)",
        ) from None
    graph = [i.name for i in inputs]
    if sorted(tok.inputs) != sorted(graph):
        raise RepositoryError(
            "model.tokenizer.inputs must feed every input of the graph, and only those",
            fix="name each graph input once, e.g. model.tokenizer.inputs={input_ids: ids, attention_mask: attention_mask}",
            details={"model.tokenizer.inputs": sorted(tok.inputs), "graph inputs": graph},
        )


def text_config(name: str, tensor_model: str, tok: TokenizerConfig, outputs: list[IOSpec], variant: VariantConfig, key: str) -> mc.ModelConfig:
    """The text model's config for one variant: text in, the graph's outputs out, batched as the tensor variant is."""
    text = IOSpec(TEXT_INPUT, "object", ("batch", 1) if variant.max_batch_size > 0 else (-1,))
    cfg = triton_config.base_config(name, [text], outputs, variant, f"variants.{key}", "cpu")
    cfg.backend = "python"
    if variant.text_instances:
        cfg.instance_group[0].count = variant.text_instances
    params = {
        "tensor_model": tensor_model,
        "max_length": str(tok.max_length),
        "truncation": "true" if tok.truncation else "false",
        "inputs": json.dumps({k: str(v) for k, v in sorted(tok.inputs.items())}),
        "outputs": json.dumps([o.name for o in outputs]),
    }
    for k, v in params.items():
        cfg.parameters[k].string_value = v
    if variant.response_cache:
        cfg.response_cache.enable = True
    return cfg


def write_text_model(cfg: PipelineConfig, out: Path, variants: dict[str, VariantConfig], io: tuple[list[IOSpec], list[IOSpec]], base: Path | None = None) -> TextEndpoint:
    """Write ``<out>/<model>_text`` for the tokenizer ``cfg.model.tokenizer``; ``variants`` are the tensor model's
    variants as rendered (a fixed-batch graph's already at max_batch_size 0). Raises RepositoryError on a bad tokenizer."""
    tok = cfg.model.tokenizer
    assert tok is not None
    inputs, outputs = io
    source = tokenizer_file(tok.path, base)
    check_tokenizer(tok, source, inputs)
    name = cfg.model.name + SUFFIX
    model_dir = out / name
    version_dir = model_dir / str(cfg.repository.version)
    version_dir.mkdir(parents=True)
    (model_dir / "configs").mkdir()
    shutil.copyfile(source, version_dir / "tokenizer.json")
    shutil.copyfile(MODEL_PY, version_dir / "model.py")
    rendered = {}
    for key, variant in variants.items():
        pb = text_config(name, cfg.model.name, tok, outputs, variant, key)
        lines = [
            f"Variant '{key}' of the text endpoint: text in (one UTF-8 sentence per row), {', '.join(o.name for o in outputs)} out.",
            f"model.py tokenizes the whole batch with tokenizer.json, pads it to its longest row (at most {tok.max_length} tokens, "
            + ("longer rows cut" if tok.truncation else "a longer row is an error")
            + f") and calls '{cfg.model.name}' once (BLS).",
            "Scheduling as the tensor model's variant of the same name; serve both with the same --model-config-name.",
        ]
        if variant.response_cache:
            lines.append("Response cache on: a text answered before is answered from the cache; the server needs --cache-config (e.g. local,size=16777216).")
        rendered[key] = triton_config.render(pb, lines)
        (model_dir / "configs" / f"{key}.pbtxt").write_text(rendered[key], encoding="utf-8")
    (model_dir / "config.pbtxt").write_text(rendered[cfg.repository.default_variant], encoding="utf-8")
    return TextEndpoint(
        model=name,
        tokenizer_source=tok.path,
        tokenizer_sha256=atomic.file_digest(version_dir / "tokenizer.json")[0],
        model_py_sha256=atomic.file_digest(version_dir / "model.py")[0],
        max_length=tok.max_length,
        truncation=tok.truncation,
    )
