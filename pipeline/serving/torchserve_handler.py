"""The TorchServe handler of the bench's peer deployments; it runs inside TorchServe's Python worker.

Shipped into every .mar as the handler file, with ``pipeline_handler.json`` beside it, so it imports nothing
from ``pipeline``. One handler for both deployments, so they differ only in the runtime:

- ``onnxruntime`` (the same graph as Triton): the shipped ONNX file in an ONNX Runtime session with the Triton
  variant's intra/inter-op threads and graph optimization level;
- ``pytorch`` (TorchServe native): the model in eager mode, built by the project's factory (``_target_``) and
  given the state dict stored in the archive (safetensors), run under ``torch.inference_mode()`` with the same
  thread counts.

Request body (what a client sends, and perf_analyzer's ``--service-kind=torchserve``): one JSON object per
request, ``{input_name: nested list}`` with the batch axis first; the response is ``{output_name: nested list}``.
Requests TorchServe batched together (``batch_size`` > 1) are concatenated along the batch axis per input shape,
run as one call, and split back per request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

Feed = dict[str, np.ndarray]
Run = Callable[[Feed], Feed]

SETTINGS_FILE = "pipeline_handler.json"


def _body(request: dict[str, Any]) -> dict[str, Any]:
    """The request's JSON body: perf_analyzer sends it as the multipart part ``data``; curl -d as ``body``."""
    raw = request.get("data")
    if raw is None:
        raw = request.get("body")
    if isinstance(raw, (bytes, bytearray)):
        raw = json.loads(raw)
    if not isinstance(raw, dict):
        raise ValueError(f"the request body must be a JSON object {{input_name: nested list}}, got {type(raw).__name__}")
    return raw


class PipelineHandler:
    """TorchServe's custom-handler protocol: ``initialize(context)`` once per worker, ``handle(data, context)`` per batch."""

    def __init__(self) -> None:
        self.initialized = False
        self.run: Run | None = None

    def initialize(self, context: Any) -> None:  # ts.context.Context
        model_dir = context.system_properties["model_dir"]
        with open(os.path.join(model_dir, SETTINGS_FILE)) as f:
            s = json.load(f)
        self.inputs = s["inputs"]  # name -> numpy dtype, in the model's argument order
        self.outputs = s["outputs"]
        self.batched = s.get("batched", True)  # False: the model has no batch axis, so every request runs alone
        self.run = self._onnxruntime(model_dir, s) if s["runtime"] == "onnxruntime" else self._pytorch(model_dir, s)
        self.initialized = True

    @staticmethod
    def _onnxruntime(model_dir: str, s: dict[str, Any]) -> Run:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = s["intra_op_threads"]  # 0: ONNX Runtime's default, as in Triton's backend
        so.inter_op_num_threads = s["inter_op_threads"]
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, s["graph_optimization_level"])
        sess = ort.InferenceSession(os.path.join(model_dir, s["model_file"]), so, providers=["CPUExecutionProvider"])
        outputs = s["outputs"]

        def run(feed: Feed) -> Feed:
            return dict(zip(outputs, sess.run(outputs, feed)))

        return run

    @staticmethod
    def _pytorch(model_dir: str, s: dict[str, Any]) -> Run:
        import torch
        from hydra.utils import instantiate
        from safetensors.torch import load_model

        if s["intra_op_threads"] > 0:
            torch.set_num_threads(s["intra_op_threads"])
        if s["inter_op_threads"] > 0:
            try:
                torch.set_num_interop_threads(s["inter_op_threads"])
            except RuntimeError:  # only settable before the first parallel work; the worker has done none yet
                pass
        model = instantiate(s["factory"]).eval()
        load_model(model, os.path.join(model_dir, s["model_file"]))
        names, outputs = list(s["inputs"]), s["outputs"]

        def run(feed: Feed) -> Feed:
            with torch.inference_mode():
                out = model(*(torch.from_numpy(feed[n]) for n in names))
            # A mapping (a Hugging Face ModelOutput) in field order, as pipeline.core.model_outputs flattens it (not imported: see above).
            out = [v for v in out.values() if v is not None] if isinstance(out, Mapping) else out if isinstance(out, (tuple, list)) else (out,)
            return {k: v.numpy() for k, v in zip(outputs, out)}

        return run

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[dict[str, list]]:
        feeds = []
        for request in data:
            body = _body(request)
            missing = [n for n in self.inputs if n not in body]
            if missing:
                raise ValueError(f"request lacks inputs {missing} (the model takes {list(self.inputs)})")
            feeds.append({n: np.asarray(body[n], dtype=dt) for n, dt in self.inputs.items()})
        groups: dict[Any, list[int]] = {}
        for i, feed in enumerate(feeds):  # one call per input shape: only equal shapes concatenate
            key = tuple((n, a.shape[1:]) for n, a in feed.items()) if self.batched else i
            groups.setdefault(key, []).append(i)
        answers: list[Any] = [None] * len(feeds)
        for idx in groups.values():
            assert self.run is not None, "initialize() runs first"
            out = self.run({n: np.concatenate([feeds[i][n] for i in idx]) for n in self.inputs})
            if not self.batched:
                answers[idx[0]] = {k: out[k].tolist() for k in self.outputs}
                continue
            start = 0
            for i in idx:
                rows = next(iter(feeds[i].values())).shape[0]
                answers[i] = {k: out[k][start : start + rows].tolist() for k in self.outputs}
                start += rows
        return answers
