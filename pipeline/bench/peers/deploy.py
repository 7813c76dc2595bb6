"""What the side-by-side bench serves through TorchServe, and how: archives, handler settings, mirrored scheduling.

Two deployments, each in both of Triton's schedules:

- **same graph** (the server comparison): the shipped ONNX file in ONNX Runtime, with the Triton variant's
  intra/inter-op threads and graph optimization level (Triton's level numbers mapped as its onnxruntime backend
  maps them);
- **native** (the runtime comparison): the PyTorch model as a TorchServe user ships it without our pipeline, in
  eager mode: the model's own factory builds the ``nn.Module`` and the archive carries its state dict
  (safetensors). Eager rather than TorchScript: ``torch.jit.trace`` is deprecated in torch 2.13 and would bake in
  whatever branches the sample took; eager runs the code the model's authors test. Same thread counts as Triton.

Scheduling mirrors the variant: TorchServe's ``batch_size`` is the largest preferred batch size (else
max_batch_size), ``max_batch_delay`` the queue delay rounded up to whole milliseconds (TorchServe's unit), and the
workers the variant's instance count; a variant without dynamic batching gets batch size 1.
"""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.stats.ort import OrtSettings
from pipeline.bench.peers.results import Scheduling
from pipeline.core.atomic import write_text
from pipeline.core.config import ModelConfig
from pipeline.stats.ort import ORT_LEVEL_NAME
from pipeline.serving.torchserve import SETTINGS_FILE, TorchServeInstall, build_mar


def instances(cfg: mc.ModelConfig) -> int:
    """The variant's model instances (Triton's instance_group counts, 1 each when unset)."""
    return sum(g.count or 1 for g in cfg.instance_group) or 1


def mirror(cfg: mc.ModelConfig) -> Scheduling:
    """TorchServe's batch_size, max_batch_delay (ms) and workers for a Triton variant's scheduling."""
    n = instances(cfg)
    if not cfg.HasField("dynamic_batching") or cfg.max_batch_size <= 0:
        return Scheduling(1, 0, n, f"no dynamic batching, {n} instance(s): batch 1")
    db = cfg.dynamic_batching
    preferred = list(db.preferred_batch_size)
    size = max(preferred) if preferred else cfg.max_batch_size
    delay_us = db.max_queue_delay_microseconds
    delay_ms = math.ceil(delay_us / 1000)
    what = f"preferred {preferred} (largest {size})" if preferred else f"no preferred sizes (max_batch_size {size})"
    return Scheduling(size, delay_ms, n, f"dynamic batching {what}, max_queue_delay {delay_us} us -> {delay_ms} ms (rounded up), {n} instance(s)")


@dataclass
class Archive:
    """One .mar in the model store, and what it runs (the report's runtime column)."""

    name: str  # the model name it registers as (and its file: <name>.mar)
    kind: str  # "same_graph" | "native"
    variant: str
    runtime: str
    pythonpath: tuple[str, ...] = ()  # where its worker imports the model's code from (native: the factory's package)


def import_root(target: str) -> tuple[str, ...]:
    """The sys.path entry the factory ``target`` (``pkg.module.fn``) is imported from here, for TorchServe's workers."""
    spec = importlib.util.find_spec(target.split(".")[0])
    if spec is None:
        return ()
    where = list(spec.submodule_search_locations or []) or ([spec.origin] if spec.origin else [])
    return tuple(str(Path(w).resolve().parent) for w in where[:1])


def _settings(runtime: str, inputs: dict[str, str], outputs: list[str], s: OrtSettings, model_file: str, batched: bool, **extra: object) -> dict:
    return {
        "runtime": runtime,
        "inputs": inputs,
        "outputs": outputs,
        "intra_op_threads": s.intra_op_threads,
        "inter_op_threads": s.inter_op_threads,
        "model_file": model_file,
        "batched": batched,
        **extra,
    }


def same_graph(inst: TorchServeInstall, name: str, variant: str, onnx: Path, cfg: mc.ModelConfig, dtypes: dict[str, str], work: Path, store: Path) -> Archive:
    """The shipped ONNX file with the variant's ORT settings, archived as ``name``.

    Raises:
        ToolError: torch-model-archiver failed (its message and the fix).
    """
    s = OrtSettings.from_config(cfg)
    level = ORT_LEVEL_NAME.get(s.graph_level, "ORT_ENABLE_ALL")
    inputs = {i.name: dtypes.get(i.name, "float32") for i in cfg.input}
    settings = _settings("onnxruntime", inputs, [o.name for o in cfg.output], s, onnx.name, cfg.max_batch_size > 0, graph_optimization_level=level)
    files = _write_settings(work / name, settings)
    extra = [p for p in onnx.parent.iterdir() if p.is_file() and p != onnx and p.suffix in (".data", ".bin")]  # external weights
    build_mar(inst, name, onnx, [files, *extra], store)
    threads = f"intra-op {s.intra_op_threads or 'default'}, inter-op {s.inter_op_threads or 'default'}"
    return Archive(name, "same_graph", variant, f"ONNX Runtime on the shipped {onnx.name} ({threads}, graph level {s.graph_level} = {level})")


def native(inst: TorchServeInstall, name: str, variant: str, model: ModelConfig, cfg: mc.ModelConfig, dtypes: dict[str, str], work: Path, store: Path) -> Archive:
    """The PyTorch model in eager mode: its factory in the handler settings, its state dict in the archive.

    Raises:
        ModelSourceError: the factory or checkpoint does not load; ToolError: the archiver failed.
    """
    import torch
    from safetensors.torch import save_model

    from pipeline.convert.export import build_module

    module = build_module(model)
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    weights = d / "model.safetensors"
    save_model(module, str(weights))  # handles shared (tied) tensors, which save_file refuses
    s = OrtSettings.from_config(cfg)
    names = [t.name for t in model.inputs] or [i.name for i in cfg.input]
    factory = OmegaConf.to_container(OmegaConf.create(dict(model.factory or {})), resolve=True)
    settings = _settings(
        "pytorch", {n: dtypes.get(n, "float32") for n in names}, list(model.outputs) or [o.name for o in cfg.output], s, weights.name, cfg.max_batch_size > 0, factory=factory
    )
    build_mar(inst, name, weights, [_write_settings(d, settings)], store)
    threads = f"torch threads intra-op {s.intra_op_threads or 'default'}, inter-op {s.inter_op_threads or 'default'}"
    target = str(factory.get("_target_", "?")) if isinstance(factory, dict) else "?"
    return Archive(
        name, "native", variant, f"PyTorch {torch.__version__.split('+')[0]} eager: {target} with the archived state dict, torch.inference_mode ({threads})", import_root(target)
    )


def _write_settings(d: Path, settings: dict) -> Path:
    path = d / SETTINGS_FILE
    write_text(path, json.dumps(settings, indent=1))
    return path


def bodies(rows: list[dict], out_dir: Path) -> list[Path]:
    """One JSON body per request row, ``{input_name: nested list}``: the files perf_analyzer sends to TorchServe."""
    out = []
    for i, row in enumerate(rows):
        p = out_dir / f"row_{i:03d}.json"
        write_text(p, json.dumps({k: v.tolist() for k, v in row.items()}))
        out.append(p)
    return out


def input_data(paths: list[Path], out: Path) -> Path:
    """perf_analyzer's ``--input-data`` for ``--service-kind=torchserve``: one step per body file (TORCHSERVE_INPUT)."""
    write_text(out, json.dumps({"data": [{"TORCHSERVE_INPUT": [str(p.resolve())]} for p in paths]}))
    return out
