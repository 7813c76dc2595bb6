"""Sample inputs for checks: real ones from the model's data hook, or synthetic from specs.

``model.data`` takes one of two forms:
  * ``{_target_: pkg.fn, **kwargs}``: a callable returning a list of feed dicts {input_name: array};
  * ``{path: file}``: a Polygraphy JSON inputs file (a list of feed dicts, as written by
    ``polygraphy run --save-inputs`` or our parity goldens ``inputs.json``), an ``.npz`` whose
    keys are input names (one feed), or an ``.npy`` of a one-input model's rows;
  * ``{path: folder, mean: [...], std: [...]}``: a folder of images for a one-input image model
    (pipeline/core/images.py).
A relative path is relative to the working directory (the repo root under ``dvc repro``); the probe
stage fingerprints the file, or the folder's images, by content (pipeline/core/sources.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.config import DType, ModelConfig, TensorSpec
from pipeline.core.errors import ConfigError, ModelSourceError, OnnxModelError
from pipeline.core.images import load_folder
from pipeline.core.polygraphy_json import load_json
from pipeline.core.specs import IOSpec, typeable

Feed = dict[str, np.ndarray]


DEFAULT_LEN = 16  # the size of a dynamic non-batch axis in synthetic samples, unless model.sample_dims names it


def _dim(dims: Mapping[str, int], axis: str, default: int) -> int:
    return int(dims.get(axis, dims.get(typeable(axis), default)))


def synthetic_feed(specs: list[TensorSpec], batch: int, seed: int, default_len: int = DEFAULT_LEN, dims: Mapping[str, int] | None = None) -> Feed:
    """Deterministic random inputs: dynamic axes get ``batch`` (axis 0), their ``dims`` entry, or ``default_len``.

    An axis named like another input's batch axis is that batch wherever it sits: a recurrent state ``[2, N, 128]``
    beside ``input [N, T]`` gets ``N`` rows on axis 1.
    """
    rng = np.random.default_rng(seed)
    dims = dims or {}
    batch_names = {str(s.shape[0]) for s in specs if s.shape and isinstance(s.shape[0], str)}
    feed: Feed = {}
    for s in specs:
        shape = [
            batch if (i == 0 and not isinstance(d, int)) or (isinstance(d, str) and d in batch_names) else (d if isinstance(d, int) else _dim(dims, str(d), default_len))
            for i, d in enumerate(s.shape)
        ]
        dt = np.dtype(s.dtype)
        if np.issubdtype(dt, np.integer):
            feed[s.name] = rng.integers(int(s.low), max(int(s.high), int(s.low) + 1), size=shape, dtype=dt)
        elif dt == np.bool_:
            feed[s.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feed[s.name] = rng.uniform(s.low, s.high, size=shape).astype(dt)
    return feed


def contiguous(a: Any) -> np.ndarray:
    """``a`` as a C-contiguous array of the same shape: ``np.ascontiguousarray`` turns a rank-0 input into shape [1]."""
    arr = np.asarray(a)
    return np.ascontiguousarray(arr).reshape(arr.shape)


INT_HIGH = 2  # an integer input the graph says nothing about gets 0 and 1 (masks, flags); a Gather's table bounds the rest


def _dtype(i: IOSpec) -> DType:
    """The graph input's dtype as a config DType; raises OnnxModelError when Triton has no data type for it."""
    try:
        return DType(i.dtype)
    except ValueError:
        raise OnnxModelError(
            f"graph input {i.name!r} has dtype {i.dtype}, which has no Triton data type",
            fix="export the model with inputs of a supported dtype, or list model.inputs in the config",
            details={"supported": ", ".join(DType.choices())},
        ) from None


def specs_from_graph(graph_inputs: list[IOSpec]) -> list[TensorSpec]:
    """TensorSpecs for a graph whose config lists no inputs (model=onnx): integer inputs range over the table they index
    (``IOSpec.index_range``), else over {0, 1}; floats over [0, 1)."""
    out = []
    for i in graph_inputs:
        shape = [d if isinstance(d, int) else (d or f"dim{k}") for k, d in enumerate(i.dims)]
        integer = np.issubdtype(np.dtype(i.dtype), np.integer)
        high = float(i.index_range or INT_HIGH) if integer else 1.0
        out.append(TensorSpec(name=i.name, dtype=_dtype(i), shape=shape, low=0.0, high=high))
    return out


def input_specs(model: ModelConfig, graph_inputs: list[IOSpec]) -> list[TensorSpec]:
    """The specs every stage builds samples from: ``model.inputs`` when listed, else the graph's own inputs.

    One rule for all stages, so a model whose inputs are read from its graph (model=onnx) gets the
    same samples in export, simplify, fp16, parity and the bench.
    """
    return list(model.inputs) or specs_from_graph(graph_inputs)


def load_feed_file(path: str | Path, names: list[str] | None = None) -> list[Feed]:
    """Feeds from a Polygraphy JSON inputs file (list of feed dicts), an .npz (one feed) or, for a model with one
    input (``names``), an .npy holding its rows (images ``[N, 3, H, W]``, say): one feed of N rows."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"model.data.path not found: {p}", fix="set model.data.path to an existing .json, .npz or .npy file, or a folder of images", details={"path": p.resolve()}
        )
    if p.suffix == ".npy":
        if not names or len(names) != 1:
            raise ConfigError(
                f"model.data.path={p} is one array, and the model takes {len(names or [])} inputs {names or ''}",
                fix="save an .npz with one array per input name: numpy.savez(path, **{name: array})",
            )
        try:
            return [{names[0]: np.load(p, allow_pickle=False)}]  # no pickles: an .npy is data, never code
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read model.data.path={p} as .npy", fix="save it with numpy.save(path, array)", details={"error": e}) from None
    if p.suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as z:  # no pickles: an .npz is data, never code
                return [{k: np.asarray(z[k]) for k in z.files}]
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read model.data.path={p} as .npz", fix="save it with numpy.savez(path, **{input_name: array})", details={"error": e}) from None
    if p.suffix != ".json":
        raise ConfigError(f"model.data.path={p} is not .json, .npz or .npy", fix="give a Polygraphy JSON inputs file, an .npz or an .npy")
    from polygraphy.exception import PolygraphyException

    try:
        data = load_json(str(p), description="sample inputs")
    except (PolygraphyException, ValueError, OSError) as e:
        raise ConfigError(
            f"cannot read model.data.path={p} as Polygraphy JSON", fix="write it with polygraphy.json.save_json([feed, ...], path)", details={"error": str(e).splitlines()[0]}
        ) from None
    feeds = [data] if isinstance(data, dict) else data
    if not isinstance(feeds, list) or not feeds or not all(isinstance(f, dict) for f in feeds):
        raise ConfigError(f"model.data.path={p} must hold a non-empty list of feed dicts {{input_name: array}}", details={"got": type(data).__name__})
    return [{str(k): np.asarray(v) for k, v in f.items()} for f in feeds]


def load_samples(
    model: ModelConfig,
    specs: list[TensorSpec] | None = None,
    batch: int = 2,
    count: int = 4,
    batch_sizes: list[int] | None = None,
) -> list[Feed]:
    """Real samples from ``model.data`` (a ``_target_`` callable or a ``path``) if set, else synthetic feeds.

    Synthetic: one feed per entry of ``batch_sizes`` if given, else ``count`` feeds of ``batch``.
    """
    if model.data and "path" in model.data and "_target_" not in model.data:
        specs = specs if specs is not None else model.inputs
        if Path(str(model.data["path"])).is_dir():
            return load_folder(str(model.data["path"]), specs, model.sample_dims, model.data.get("mean"), model.data.get("std"))
        return load_feed_file(str(model.data["path"]), [s.name for s in specs] or None)
    if model.data:
        from hydra.errors import InstantiationException
        from hydra.utils import instantiate

        try:
            feeds: Any = instantiate(model.data)
        except InstantiationException as e:
            raise ModelSourceError(
                f"the sample-data hook model.data._target_={model.data.get('_target_')} failed",
                fix="point model.data._target_ at an importable function returning a list of {input_name: array}",
                details={"error": str(e).splitlines()[0]},
            ) from None
        if not isinstance(feeds, list) or not feeds or not all(isinstance(f, dict) for f in feeds):
            raise ConfigError(
                "model.data must return a non-empty list of feed dicts {input_name: numpy array}",
                details={"got": type(feeds).__name__},
            )
        return [{k: np.asarray(v) for k, v in f.items()} for f in feeds]
    specs = specs if specs is not None else model.inputs
    if not specs:
        raise ConfigError("no input specs to build samples from", fix="list model.inputs in the model config")
    if batch_sizes:
        return [synthetic_feed(specs, b, model.seed + i, dims=model.sample_dims) for i, b in enumerate(batch_sizes)]
    return [synthetic_feed(specs, batch, model.seed + i, dims=model.sample_dims) for i in range(count)]


# ---------------------------------------------------------------- requests a client sends
def request_rows(samples: list[Feed], batched: bool) -> list[Feed]:
    """Split sample feeds into the batch-1 requests a client sends (one row each)."""
    if not batched:
        return [dict(f) for f in samples]
    rows: list[Feed] = []
    for feed in samples:
        n = next(iter(feed.values())).shape[0]
        rows += [{k: np.asarray(v)[i : i + 1] for k, v in feed.items()} for i in range(n)]
    return rows


def shape_key(feed: Feed) -> tuple:
    """Identity of a request's shapes; Triton batches only requests with equal shapes."""
    return tuple((k, v.shape[1:]) for k, v in sorted(feed.items()))


def by_shape(rows: list[Feed]) -> list[list[Feed]]:
    groups: dict[tuple, list[Feed]] = {}
    for r in rows:
        groups.setdefault(shape_key(r), []).append(r)
    return list(groups.values())


def uniform_rows(rows: list[Feed]) -> list[Feed]:
    """The largest group of rows sharing one shape (what a client padding to one length sends)."""
    return max(by_shape(rows), key=len)


def read_sentences(path: Path) -> list[str]:
    """Non-empty, non-comment lines of a sentence file (one sentence per line; ``#`` starts a comment line)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
