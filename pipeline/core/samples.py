"""Sample inputs for checks: real ones from the model's data hook, or synthetic from specs."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.core.config import ModelConfig, TensorSpec
from pipeline.core.errors import ConfigError, ModelSourceError
from pipeline.core.specs import IOSpec

Feed = dict[str, np.ndarray]


def synthetic_feed(specs: list[TensorSpec], batch: int, seed: int, default_len: int = 16) -> Feed:
    """Deterministic random inputs: dynamic axes get ``batch`` (axis 0) or ``default_len``."""
    rng = np.random.default_rng(seed)
    feed: Feed = {}
    for s in specs:
        shape = [batch if i == 0 and not isinstance(d, int) else (d if isinstance(d, int) else default_len) for i, d in enumerate(s.shape)]
        dt = np.dtype(s.dtype)
        if np.issubdtype(dt, np.integer):
            feed[s.name] = rng.integers(int(s.low), max(int(s.high), int(s.low) + 1), size=shape, dtype=dt)
        elif dt == np.bool_:
            feed[s.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feed[s.name] = rng.uniform(s.low, s.high, size=shape).astype(dt)
    return feed


def specs_from_graph(graph_inputs: list[IOSpec]) -> list[TensorSpec]:
    """TensorSpecs for a graph whose config lists no inputs (model=onnx)."""
    return [TensorSpec(name=i.name, dtype=i.dtype, shape=[d if isinstance(d, int) else (d or f"dim{k}") for k, d in enumerate(i.dims)]) for i in graph_inputs]


def load_samples(model: ModelConfig, specs: list[TensorSpec] | None = None, batch: int = 2, count: int = 4) -> list[Feed]:
    """Real samples from ``model.data`` (a ``_target_`` callable) if set, else ``count`` synthetic feeds."""
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
    return [synthetic_feed(specs, batch, model.seed + i) for i in range(count)]
