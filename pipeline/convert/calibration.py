"""The calibration set: real samples from the model's data hook, checked against the graph, saved as Polygraphy JSON.

It is a DVC-tracked file of its own (``artifacts/calibration/samples.json``, which ``polygraphy run --load-inputs``
reads too), so the int8 stage depends on its content: new samples rerun int8 and nothing that does not use INT8.
A row is one entry of a sample's batch axis; the hook's samples are kept as it batched and padded them. Real samples
are split first (pipeline/core/holdout.py): only the calibration part is written here; the held-out part is what
the parity gate judges on, so neither the quantizer nor the fallback's search ever sees it.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pipeline.core import atomic, holdout
from pipeline.core.config import CalibrationConfig, ModelConfig
from pipeline.core.errors import QuantizationError
from pipeline.core.holdout import rows_of
from pipeline.core.polygraphy_json import load_json, save_json
from pipeline.core.samples import contiguous, input_specs, load_samples
from pipeline.core.specs import IOSpec, graph_io

Feed = dict[str, np.ndarray]


def source_of(model: ModelConfig) -> str:
    """Where the samples come from, as the report says it."""
    if model.data and "_target_" in model.data:
        return f"model.data hook {model.data['_target_']}"
    if model.data and "path" in model.data:
        return f"model.data file {model.data['path']}"
    return "synthetic (model.data is null): ranges from random inputs, not real data"


def check_feeds(feeds: list[Feed], graph_inputs: list[IOSpec]) -> None:
    """Every sample names every graph input with its dtype, rank and fixed dims; raise one QuantizationError listing each mismatch."""
    problems: dict[str, str] = {}
    for i, feed in enumerate(feeds):
        for spec in graph_inputs:
            key = f"sample {i} '{spec.name}'"
            if spec.name not in feed:
                problems[key] = f"missing (the sample has {sorted(feed)})"
                continue
            a = feed[spec.name]
            if a.dtype.name != spec.dtype:
                problems[key] = f"dtype {a.dtype.name}, the graph takes {spec.dtype}"
            elif a.ndim != len(spec.dims):
                problems[key] = f"shape {list(a.shape)}, the graph takes rank {len(spec.dims)} {list(spec.dims)}"
            elif any(isinstance(d, int) and d > 0 and d != n for d, n in zip(spec.dims, a.shape)):
                problems[key] = f"shape {list(a.shape)} does not fit the graph's {list(spec.dims)}"
        if len(problems) >= 10:
            break
    if problems:
        raise QuantizationError(
            "the calibration samples do not match the graph's inputs",
            fix="make model.data return arrays with the graph's input names, dtypes and fixed dims (see the graph's inputs below)",
            details={**problems, "graph inputs": ", ".join(f"{s.name} {s.dtype} {list(s.dims)}" for s in graph_inputs)},
        )


def limit_rows(feeds: list[Feed], most: int, batched: bool = True) -> list[Feed]:
    """The first ``most`` rows, in the hook's order: the last sample cut along its batch axis, or left out whole when
    the model has no batch axis to cut."""
    out: list[Feed] = []
    left = most
    for f in feeds:
        n = rows_of(f)
        if left <= 0 or (n > left and not batched):
            break
        out.append(f if n <= left else {k: v[:left] for k, v in f.items()})
        left -= min(n, left)
    return out


def rows_needed(cfg: CalibrationConfig) -> int:
    """The fewest hook rows the split turns into enough calibration and held-out rows."""
    n = held = 0
    while held < cfg.min_holdout or n - held < cfg.min_samples:
        held += holdout.is_held_out(n, cfg.holdout)
        n += 1
    return n


def check_split(s: holdout.Split, cfg: CalibrationConfig, model: ModelConfig) -> None:
    """Both parts are large enough and share no row; raise one QuantizationError naming the keys otherwise."""
    cal, held = s.calibration.rows, s.holdout.rows
    if cal < cfg.min_samples or held < cfg.min_holdout:
        raise QuantizationError(
            f"{cal + held} sample rows from model.data: int8.calibration.holdout={cfg.holdout} leaves {cal} to calibrate "
            f"(int8.calibration.min_samples={cfg.min_samples}) and {held} held out for the parity gate "
            f"(int8.calibration.min_holdout={cfg.min_holdout})",
            fix=f"give model.data at least {rows_needed(cfg)} rows (more real samples calibrate and judge better), or lower "
            "int8.calibration.min_samples / int8.calibration.min_holdout, or move int8.calibration.holdout",
            details={"source": source_of(model), "calibration rows": cal, "held-out rows": held},
        )
    seen = set(holdout.row_digests(s.calibration.feeds, s.calibration.batched))
    copies = [u for u, d in zip(s.holdout.units, holdout.row_digests(s.holdout.feeds, s.holdout.batched)) if d in seen]
    if copies:
        raise QuantizationError(
            f"{len(copies)} held-out rows of model.data are exact copies of calibration rows: the parity gate would judge INT8 on rows it was calibrated on",
            fix="make model.data return each sample once",
            details={"source": source_of(model), "held-out rows (hook order)": copies[:10]},
        )


def build(model: ModelConfig, graph: onnx.ModelProto, cfg: CalibrationConfig, synthetic_batch_sizes: list[int]) -> tuple[list[Feed], dict[str, Any]]:
    """The calibration samples from ``model.data`` for ``graph``: checked, the held-out part taken out (real samples
    only), limited; returns (samples, description).

    Raises QuantizationError: the samples do not fit the graph, either part of the split has fewer rows than its
    minimum, a held-out row is a copy of a calibration row, or synthetic samples have fewer rows than the minimum.
    """
    inputs, _ = graph_io(graph)
    specs = input_specs(model, inputs)
    feeds = load_samples(model, specs, batch_sizes=list(synthetic_batch_sizes))
    names = {s.name for s in inputs}
    ignored = sorted({k for f in feeds for k in f if k not in names})  # a hook may return more than the graph takes
    feeds = [{k: contiguous(v) for k, v in f.items() if k in names} for f in feeds]
    check_feeds(feeds, inputs)
    total = sum(rows_of(f) for f in feeds)
    batched = holdout.batched(specs)
    if model.data is None:
        # Synthetic inputs are no data to hold out: no target may serve INT8 from them (checked at composition).
        split: dict[str, Any] = {"none": "synthetic samples: calibration and parity use the same random inputs; no target may serve int8"}
        if total < cfg.min_samples:
            raise QuantizationError(
                f"{total} synthetic calibration rows, fewer than int8.calibration.min_samples={cfg.min_samples}",
                fix="lower int8.calibration.min_samples, or set model.data to real samples",
                details={"rows per sample": [rows_of(f) for f in feeds]},
            )
        calib = feeds
    else:
        s = holdout.split(feeds, cfg.holdout, batched)
        check_split(s, cfg, model)
        split, calib = s.record(), s.calibration.feeds
    kept = limit_rows(calib, cfg.max_samples, batched)
    rows = sum(rows_of(f) for f in kept)
    return kept, {
        "source": source_of(model),
        "rows": rows,
        "rows_available": total,
        "samples": len(kept),
        "limited_to": cfg.max_samples if rows < sum(rows_of(f) for f in calib) else None,
        "batch_sizes": [rows_of(f) for f in kept],
        "real": model.data is not None,
        "ignored_keys": ignored,
        "split": split,
        "inputs": {s.name: {"dtype": s.dtype, "dims": list(s.dims)} for s in inputs},
    }


def save(feeds: list[Feed], path: Path) -> None:
    """Write the samples as Polygraphy JSON (a list of feed dicts), atomically."""
    with atomic.atomic_path(path, suffix=".json") as tmp:
        save_json([OrderedDict(f) for f in feeds], str(tmp), description="calibration samples")


def load(path: Path) -> list[Feed]:
    """Read a calibration set written by :func:`save`; raise QuantizationError when it is missing or unreadable."""
    from polygraphy.exception import PolygraphyException

    if not path.is_file():
        raise QuantizationError(f"calibration set not found: {path}", fix="run the calibrate stage: dvc repro calibrate")
    try:
        feeds = [{k: np.asarray(v) for k, v in f.items()} for f in load_json(str(path), description="calibration samples")]
    except (PolygraphyException, ValueError, TypeError, OSError) as e:
        raise QuantizationError(
            f"cannot read the calibration set {path}",
            fix="rerun the calibrate stage: dvc repro calibrate",
            details={"error": str(e).splitlines()[0] if str(e) else type(e).__name__},
        ) from None
    if not feeds:
        raise QuantizationError(f"the calibration set {path} is empty", fix="rerun the calibrate stage: dvc repro calibrate")
    return feeds


def record(path: Path) -> dict[str, Any]:
    """The file's identity, as the reports carry it: path, sha256, bytes."""
    sha, size = atomic.file_digest(path)
    return {"file": str(path), "sha256": sha, "bytes": size}
