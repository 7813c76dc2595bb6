"""The requests every bench measurement sends: the model's samples as batch-1 rows, in the graph's dtypes.

The served runs (perf_analyzer), the in-process baseline and the gauges all take these same rows,
so served and in-process numbers are comparable request for request.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.config import InputShapes, ModelConfig
from pipeline.core.samples import input_specs, load_samples, request_rows, shape_key, uniform_rows
from pipeline.core.specs import graph_io
from pipeline.serving.client import infer_inputs
from pipeline.stats.ort import Feed


def http_inputs(row: Feed) -> list:
    """A request row as tritonclient HTTP inputs (binary tensors), what every Python-side request to Triton sends."""
    return infer_inputs(row, "http")


@dataclass
class InputsInfo:
    """The requests sent: how many, which shape policy, how many distinct shapes."""

    requests: int
    policy: str
    distinct_shapes: int


@dataclass
class BenchInputs:
    """The request rows and what perf_analyzer and the diagnosis need to know about them."""

    rows: list[Feed]
    batched: bool  # the served config has a batch axis (max_batch_size > 0)
    shapes: dict[str, list[int]]  # perf_analyzer --shape per input; empty when the rows have mixed shapes
    graph_dtypes: dict[str, str]  # the ONNX graph's input dtypes (the diagnosis compares the config's with them)
    policy: str

    @property
    def info(self) -> InputsInfo:
        return InputsInfo(len(self.rows), self.policy, len({shape_key(r) for r in self.rows}))


def prepare(model: ModelConfig, onnx_path: Path, served: mc.ModelConfig, policy: InputShapes) -> BenchInputs:
    """The model's samples as batch-1 requests for the ``served`` config's inputs, cast to the graph's dtypes."""
    graph_in, _ = graph_io(onnx.load(str(onnx_path), load_external_data=False))
    graph_dtypes = {s.name: s.dtype for s in graph_in}
    batched = served.max_batch_size > 0
    names = [i.name for i in served.input]
    # The same specs rule as every other stage: model.inputs, else the shipped graph's own inputs (model=onnx).
    samples = [{k: v for k, v in f.items() if k in names} for f in load_samples(model, input_specs(model, graph_in))]
    rows = request_rows(samples, batched)
    if policy == InputShapes.uniform:
        rows = uniform_rows(rows)
    # Cast to the graph's dtypes: the data hook may give int32 where the model takes int64.
    rows = [{k: v.astype(graph_dtypes.get(k, v.dtype)) for k, v in r.items()} for r in rows]
    # --shape pins one shape for every request; with mixed shapes the JSON's per-step shapes must rule.
    one_shape = len({shape_key(r) for r in rows}) == 1
    shapes = {k: list(v.shape[1:] if batched else v.shape) for k, v in rows[0].items()} if one_shape else {}
    return BenchInputs(rows, batched, shapes, graph_dtypes, str(policy))
