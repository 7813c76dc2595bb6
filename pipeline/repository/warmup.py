"""The ``model_warmup`` section of a variant's config, from Triton's schema, fed one real sample row.

Triton runs these requests while it loads the model and reports the model ready only after them, so a
"ready" server is already warm. The data is a real request (the first row of the largest same-shape group of
the model's samples, the row the bench sends first) written as raw row-major bytes under ``<model>/warmup/``
and named by ``input_data_file``. Why not Triton's ``zero_data`` or ``random_data``: random token ids index
outside an embedding table and fail the load, and zeros are a request no client sends (an all-zero attention
mask); a real row runs exactly the path requests take, data-dependent operators included.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.config import ModelConfig, WarmupConfig
from pipeline.core.samples import contiguous, input_specs, load_samples, request_rows, uniform_rows
from pipeline.core.specs import IOSpec

WARMUP_DIR = "warmup"  # Triton reads input_data_file from this sub-directory of the model directory
Feed = dict[str, np.ndarray]


def sample_row(model: ModelConfig, inputs: list[IOSpec], batched: bool) -> Feed:
    """One real request: the first row of the largest same-shape group, cast to the graph's input dtypes.

    With ``batched`` the row keeps a batch axis of 1 (Triton adds the batch); without it, a whole sample feed.
    """
    samples = load_samples(model, input_specs(model, inputs))
    names = {i.name: i.dtype for i in inputs}
    row = uniform_rows(request_rows([{k: v for k, v in f.items() if k in names} for f in samples], batched))[0]
    return {k: contiguous(v.astype(names[k])) for k, v in row.items()}


def file_names(row: Feed, batched: bool) -> dict[str, str]:
    """A file name per input, safe on any filesystem (Triton input names may hold '/' or ':'); a whole feed (no batch
    axis in the config) gets its own files, so a batching and a non-batching variant can share the directory."""
    out: dict[str, str] = {}
    for name in row:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ("" if batched else ".unbatched")
        while safe in out.values():
            safe += "_"
        out[name] = safe
    return out


def write_files(model_dir: Path, row: Feed, batched: bool) -> None:
    """``<model_dir>/warmup/<input>``: the row's raw row-major bytes, without the batch axis when ``batched``."""
    d = model_dir / WARMUP_DIR
    d.mkdir(parents=True, exist_ok=True)
    for name, fname in file_names(row, batched).items():
        arr = row[name][0] if batched else row[name]
        (d / fname).write_bytes(np.ascontiguousarray(arr).tobytes())


def add_warmup(cfg: mc.ModelConfig, w: WarmupConfig, row: Feed, data_types: dict[str, int]) -> None:
    """One warmup sample per batch size (batch 1 only when the config has no batch axis), each run ``w.count`` times."""
    batched = cfg.max_batch_size > 0
    names = file_names(row, batched)
    for b in w.batch_sizes if batched else [1]:
        sample = cfg.model_warmup.add(name=f"sample_batch_{b}", batch_size=b, count=w.count)
        for name, arr in row.items():
            dims = arr.shape[1:] if batched else arr.shape
            sample.inputs[name].CopyFrom(mc.ModelWarmup.Input(data_type=data_types[name], dims=list(dims), input_data_file=names[name]))


def describe(w: WarmupConfig | None, row: Feed | None, batched: bool) -> str:
    """The header line that says what the warmup runs."""
    if w is None or row is None:
        return "No model_warmup: the first request after a load pays ONNX Runtime's first-run cost (see the bench's cold start)."
    shapes = ", ".join(f"{k} {list(v.shape[1:] if batched else v.shape)}" for k, v in row.items())
    sizes = w.batch_sizes if batched else [1]
    return f"model_warmup: one real sample row ({shapes}; files in {WARMUP_DIR}/) at batch sizes {sizes}, {w.count}x each, run by Triton before it reports the model ready."
