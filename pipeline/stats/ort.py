"""ONNX Runtime timed in this process, with exactly the settings a served model uses.

The bench's baseline and gauges, the choose stage's paired rounds and the canary all time ORT through these, so a
served number and its in-process reference differ only in the serving path.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.samples import by_shape

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

Json = dict[str, Any]
Feed = dict[str, np.ndarray]  # one request row (or batch): input name -> array

# Triton's onnxruntime backend maps optimization.graph.level: -1 -> ORT_ENABLE_BASIC, 1 -> ORT_ENABLE_EXTENDED,
# 2 -> ORT_DISABLE_ALL, anything else (0 or absent) -> ORT_ENABLE_ALL. So 2 is not "more" optimization but none at
# all. (pipeline/serving/python_standin.py repeats this table: it runs inside the python-backend stub, which cannot
# import this package.)
ORT_LEVEL_NAME = {1: "ORT_ENABLE_EXTENDED", -1: "ORT_ENABLE_BASIC", 0: "ORT_ENABLE_ALL", 2: "ORT_DISABLE_ALL"}


@dataclass
class OrtSettings:
    """The ONNX Runtime settings a Triton config implies."""

    intra_op_threads: int
    inter_op_threads: int
    graph_level: int

    @classmethod
    def from_config(cls, cfg: mc.ModelConfig) -> OrtSettings:
        p = cfg.parameters
        intra = int(p["intra_op_thread_count"].string_value or 0) if "intra_op_thread_count" in p else 0
        inter = int(p["inter_op_thread_count"].string_value or 0) if "inter_op_thread_count" in p else 0
        level = cfg.optimization.graph.level if cfg.HasField("optimization") else 0
        return cls(intra, inter, level)


@dataclass
class Latency:
    """Batch-1 latency percentiles in process (ms), over ``n`` timed runs."""

    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    n: int
    settings: OrtSettings | None = None

    def to_json(self) -> Json:
        d: Json = {k: getattr(self, k) for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms", "n")}
        return d | ({"settings": asdict(self.settings)} if self.settings else {})

    @classmethod
    def from_json(cls, d: Json) -> Latency:
        s = d.get("settings")
        return cls(d["p50_ms"], d["p95_ms"], d["p99_ms"], d["mean_ms"], d["n"], OrtSettings(**s) if s else None)


def ort_session(onnx_path: Path, s: OrtSettings):  # noqa: ANN201 - onnxruntime type
    """An ORT CPU session with exactly the settings the served model uses."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = s.intra_op_threads
    so.inter_op_num_threads = s.inter_op_threads
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVEL_NAME.get(s.graph_level, "ORT_ENABLE_ALL"))
    return ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])


def percentiles(x: list[float], settings: OrtSettings | None = None) -> Latency:
    """p50/p95/p99/mean in ms of durations in seconds."""
    a = np.asarray(x) * 1e3
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return Latency(float(p50), float(p95), float(p99), float(a.mean()), int(a.size), settings)


def time_runs(sess, rows: list[Feed], warmup: int, runs: int) -> list[float]:  # noqa: ANN001 - onnxruntime type
    """Seconds per batch-1 ``sess.run``: ``warmup`` untimed runs, then ``runs`` timed, cycling the rows."""
    for i in range(warmup):
        sess.run(None, rows[i % len(rows)])
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        sess.run(None, rows[i % len(rows)])
        times.append(time.perf_counter() - t0)
    return times


def same_shape_batches(rows: list[Feed], b: int) -> list[Feed]:
    """One batch of ``b`` rows per input shape, tiling each same-shape group (Triton batches only equal shapes)."""
    out = []
    for g in by_shape(rows):
        picks = [g[i % len(g)] for i in range(b)]
        out.append({k: np.concatenate([p[k] for p in picks]) for k in picks[0]})
    return out
