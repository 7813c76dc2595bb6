"""Triton python-backend model that runs one ONNX file with ONNX Runtime (CPU).

This file is copied as ``<version>/model.py`` into the *embedded* serving
repository (see :mod:`pipeline.serving.embedded`). It stands in for
Triton's onnxruntime backend, which the nvidia-pytriton wheel does not ship, so
it reads the same config keys that backend reads:

- ``parameters { key: "intra_op_thread_count" }`` / ``inter_op_thread_count``
- ``optimization { graph { level } }`` with the onnxruntime backend's mapping:
  absent/0 -> ORT_ENABLE_ALL, -1 -> ORT_ENABLE_BASIC, 1 -> ORT_ENABLE_EXTENDED,
  2 -> ORT_DISABLE_ALL (so level 2 is OFF, not "more").
- ``parameters { key: "onnx_path" }``: absolute path of the ONNX file to serve
  (added by the embedded repository builder; the shipped file, not a copy).

It also counts, as Triton custom metrics (python backend ``pb_utils.MetricFamily``), the
nanoseconds spent inside ``session.run`` and inside ``execute`` and the number of
executions, so the bench can split Triton's "compute infer" time into ONNX Runtime and the
python backend's own cost (IPC to this stub, Python) - a cost the real onnxruntime backend
does not have.

It runs inside the python-backend stub process, so it imports nothing from the
``pipeline`` package: only numpy, onnxruntime and triton_python_backend_utils. The
stub's embedded interpreter ignores ``PYTHONPATH``, so the builder writes
``sys_path.json`` (our site-packages) beside this file and we extend ``sys.path`` first.
"""

from __future__ import annotations

import json
import os
import sys
import time

_PATHS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sys_path.json")
if os.path.isfile(_PATHS):
    with open(_PATHS, encoding="utf-8") as _f:
        sys.path[:0] = [p for p in json.load(_f) if p not in sys.path]

import numpy as np  # noqa: E402 - needs the sys.path above
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402 - provided by the stub

# Triton's onnxruntime backend mapping of optimization.graph.level (src/onnxruntime.cc, ModelState constructor):
# a copy of pipeline/repository/config.py ORT_LEVEL_NAME, repeated because this file runs inside the stub and
# cannot import the pipeline package. tests/serving/test_serving_layout.py checks that the two tables agree.
_GRAPH_LEVELS = {
    0: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


def _param(config: dict, key: str) -> str | None:
    """A string parameter from the model config's ``parameters`` map (None: absent or empty)."""
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    return value or None


class TritonPythonModel:
    """One ORT session per model instance, fed the batch Triton's scheduler formed."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        onnx_path = _param(config, "onnx_path")
        if not onnx_path or not os.path.isfile(onnx_path):
            raise pb_utils.TritonModelException(f"onnx_path parameter names no file: {onnx_path!r}")
        so = ort.SessionOptions()
        # Triton's onnxruntime backend leaves ORT defaults (0 = ORT decides) when a key is absent.
        so.intra_op_num_threads = int(_param(config, "intra_op_thread_count") or "0")
        so.inter_op_num_threads = int(_param(config, "inter_op_thread_count") or "0")
        level = int(config.get("optimization", {}).get("graph", {}).get("level", 0))
        so.graph_optimization_level = _GRAPH_LEVELS.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        self.session = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0
        flush_s = float(_param(config, "standin_flush_s") or 0.5)
        self.timers = _Timers(config.get("name", ""), args.get("model_instance_name", ""), flush_s)

    def execute(self, requests: list) -> list:
        """Run the requests Triton batched together as one ORT call per input-shape group.

        Triton's dynamic batcher only groups requests with equal shapes, but group
        defensively so a mixed list still gives every request its own rows back.
        """
        t0 = time.perf_counter_ns()
        responses = self._execute(requests)
        self.timers.add(execute_ns=time.perf_counter_ns() - t0)
        return responses

    def _run(self, feed: dict) -> list:
        t0 = time.perf_counter_ns()
        outs = self.session.run(self.outputs, feed)
        self.timers.add(ort_ns=time.perf_counter_ns() - t0)
        return outs

    def _execute(self, requests: list) -> list:
        responses: list = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        feeds_per_req = []
        for i, req in enumerate(requests):
            feed = {n: pb_utils.get_input_tensor_by_name(req, n).as_numpy() for n in self.inputs}
            feeds_per_req.append(feed)
            key = tuple((n, a.shape, a.dtype.str) for n, a in feed.items())
            groups.setdefault(key, []).append(i)
        for idx in groups.values():
            try:
                if not (self.batched and len(idx) > 1):
                    for i in idx:
                        responses[i] = self._response(self._run(feeds_per_req[i]))
                    continue
                feed = {n: np.concatenate([feeds_per_req[i][n] for i in idx], axis=0) for n in self.inputs}
                sizes = [feeds_per_req[i][self.inputs[0]].shape[0] for i in idx]
                outs = self._run(feed)
                offsets = np.cumsum([0] + sizes)
                for j, i in enumerate(idx):
                    responses[i] = self._response([o[offsets[j] : offsets[j + 1]] for o in outs])
            except Exception as e:  # noqa: BLE001 - every request must get a response, with ORT's message
                for i in idx:
                    responses[i] = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(e)))
        return responses

    def _response(self, outs: list[np.ndarray]):  # noqa: ANN202 - pb_utils type
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, np.ascontiguousarray(o)) for n, o in zip(self.outputs, outs)])

    def finalize(self) -> None:
        self.session = None
        self.timers.close()


class _Timers:
    """Counters on Triton's /metrics: ns in session.run, ns in execute, executions.

    Each metric update is a message from this stub to the server, so updates are summed
    here and flushed at most every ``flush_s`` seconds (parameter ``standin_flush_s``): a
    request pays for it once in a few hundred, not every time. The bench lines the counters
    up with its measurement windows by sending one request ``flush_s`` after a run. Without the metrics API (metrics off, an old python backend)
    the counters are absent and the bench reports Triton's compute time unsplit.
    """

    NAMES = {
        "ort_ns": "pipeline_standin_ort_run_ns",
        "execute_ns": "pipeline_standin_execute_ns",
        "executions": "pipeline_standin_executions",
    }

    def __init__(self, model: str, instance: str, flush_s: float) -> None:
        self.flush_s = flush_s
        self.families: list = []  # a MetricFamily must outlive its Metrics: keep both
        self.metrics: dict = {}
        self.pending = dict.fromkeys(self.NAMES, 0.0)
        self.last_flush = time.monotonic()
        try:
            for key, name in self.NAMES.items():
                fam = pb_utils.MetricFamily(name=name, description=f"embedded bench stand-in: {key}", kind=pb_utils.MetricFamily.COUNTER)
                self.families.append(fam)
                self.metrics[key] = fam.Metric(labels={"model": model, "instance": instance})
        except Exception:  # noqa: BLE001 - timing is optional, serving is not
            self.metrics = {}

    def add(self, ort_ns: int = 0, execute_ns: int = 0) -> None:
        if not self.metrics:
            return
        self.pending["ort_ns"] += ort_ns
        if execute_ns:
            # Counted once per execute, after it: the flush below is never inside a timed span.
            self.pending["execute_ns"] += execute_ns
            self.pending["executions"] += 1
            if time.monotonic() - self.last_flush >= self.flush_s:
                self.flush()

    def flush(self) -> None:
        for key, value in self.pending.items():
            if value:
                self.metrics[key].increment(float(value))
        self.pending = dict.fromkeys(self.NAMES, 0.0)
        self.last_flush = time.monotonic()

    def close(self) -> None:
        self.metrics = {}  # Metrics before their families
        self.families = []
