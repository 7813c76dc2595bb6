"""Triton python-backend model: text in, the tensor model's outputs out (BLS).

Copied as ``<model>_text/<version>/model.py`` into the repository, beside ``tokenizer.json``. It takes ``text``
(TYPE_STRING, one UTF-8 sentence per row), tokenizes every row of the dynamic batch at once with the ``tokenizers``
library, pads them to the longest row, and calls the tensor model once through Triton's BLS API; each request gets
its own rows of each output back.

Why one BLS model and not an ensemble: the dynamic batcher can only merge requests of one shape, and token ids of
sentences of different lengths have different shapes. An ensemble must pad every request to the maximum length
(128 positions for a 10-token sentence) or lose batching; here the batch is padded to its own longest row.

Parameters (config.pbtxt ``parameters``), all written by the repository stage:

- ``tensor_model``: the model that computes the outputs (the same repository's ONNX model);
- ``max_length``: the longest row in tokens, special tokens included; ``truncation``: ``true`` cuts a longer row
  to it (as the reference does), ``false`` answers that request with an error naming its length;
- ``inputs``: JSON ``{graph input: "ids" | "attention_mask" | "type_ids"}``; ``outputs``: JSON list of output names;
- ``tensor_version`` (optional, written by ``release promote`` in an environment): the version of ``tensor_model``
  to call, so that the endpoint answers only with the model it was switched with; absent, the served one.

A request with an empty batch, or with bytes that are not UTF-8, gets an error of its own; the other requests of
the batch are answered. This file runs inside the python-backend stub: it imports only numpy, tokenizers and
triton_python_backend_utils. In NVIDIA's containers ``tokenizers`` comes from pip in the image or from an
``EXECUTION_ENV_PATH`` archive (docs/serving.md).
"""

from __future__ import annotations

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils  # provided by the stub
from tokenizers import Tokenizer

FIELDS = ("ids", "attention_mask", "type_ids")


def _param(config: dict, key: str) -> str:
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    if not value:
        raise pb_utils.TritonModelException(f"config.pbtxt has no parameter '{key}': regenerate the repository (dvc repro repository)")
    return value


class TritonPythonModel:
    """Tokenize a dynamic batch, pad it to its longest row, run the tensor model once, split the outputs per request."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.tensor_model = _param(config, "tensor_model")
        self.max_length = int(_param(config, "max_length"))
        self.truncation = _param(config, "truncation") == "true"
        self.inputs: dict[str, str] = json.loads(_param(config, "inputs"))
        self.outputs: list[str] = json.loads(_param(config, "outputs"))
        pin = config.get("parameters", {}).get("tensor_version", {}).get("string_value", "")
        self.tensor_version = int(pin) if pin.isdigit() else -1  # -1: the version Triton serves
        path = os.path.join(args["model_repository"], args["model_version"], "tokenizer.json")
        self.tokenizer = Tokenizer.from_file(path)
        pad = self.tokenizer.padding  # the file's own padding (often fixed-length): its pad id, before it is turned off
        self.pad_id = pad["pad_id"] if pad else (self.tokenizer.token_to_id("[PAD]") or 0)
        # Padding is done here, to the batch's longest row; truncation only when the config says so.
        self.tokenizer.no_padding()
        if self.truncation:
            self.tokenizer.enable_truncation(self.max_length)
        else:
            self.tokenizer.no_truncation()

    def _rows(self, request: object) -> list[str] | str:
        """The request's sentences, or the error message that answers it."""
        tensor = pb_utils.get_input_tensor_by_name(request, "text")
        if tensor is None:
            return "the request has no input 'text'"
        values = tensor.as_numpy().reshape(-1)
        if values.size == 0:
            return "the request's 'text' holds no rows: send one sentence per row"
        rows = []
        for i, v in enumerate(values):
            if isinstance(v, str):
                rows.append(v)
                continue
            try:
                rows.append(bytes(v).decode("utf-8"))
            except UnicodeDecodeError as e:
                return f"row {i} of 'text' is not UTF-8 ({e.reason} at byte {e.start}): send UTF-8 text"
        return rows

    def execute(self, requests: list) -> list:
        answers: list = [None] * len(requests)
        spans: list[tuple[int, int, int]] = []  # (request index, first row, row count) of the requests tokenized
        texts: list[str] = []
        for r, request in enumerate(requests):
            rows = self._rows(request)
            if isinstance(rows, str):
                answers[r] = pb_utils.InferenceResponse(error=pb_utils.TritonError(rows))
                continue
            spans.append((r, len(texts), len(rows)))
            texts.extend(rows)
        encodings = self.tokenizer.encode_batch(texts) if texts else []
        kept: list[tuple[int, int, int]] = []
        for r, first, n in spans:
            longest = max(len(e.ids) for e in encodings[first : first + n])
            if longest > self.max_length:  # truncation is off
                msg = f"a row of 'text' is {longest} tokens, over max_length {self.max_length}: shorten it, or ship with model.tokenizer.truncation=true"
                answers[r] = pb_utils.InferenceResponse(error=pb_utils.TritonError(msg))
            else:
                kept.append((r, first, n))
        if kept:
            self._infer(kept, encodings, answers)
        return answers

    def _infer(self, kept: list[tuple[int, int, int]], encodings: list, answers: list) -> None:
        """One call of the tensor model for every kept row, padded to the longest of them; fills ``answers``."""
        rows = [e for _, first, n in kept for e in encodings[first : first + n]]
        width = max(len(e.ids) for e in rows)
        arrays = {f: np.full((len(rows), width), self.pad_id if f == "ids" else 0, dtype=np.int64) for f in FIELDS}
        for i, e in enumerate(rows):
            for f in FIELDS:
                values = getattr(e, f)
                arrays[f][i, : len(values)] = values
        inputs = [pb_utils.Tensor(name, arrays[field]) for name, field in self.inputs.items()]
        pinned = {"model_version": self.tensor_version} if self.tensor_version >= 0 else {}  # unpinned: exactly the call before pins
        response = pb_utils.InferenceRequest(model_name=self.tensor_model, requested_output_names=self.outputs, inputs=inputs, **pinned).exec()
        if response.has_error():
            which = f"'{self.tensor_model}'" + (f" version {self.tensor_version}" if self.tensor_version >= 0 else "")
            error = pb_utils.TritonError(f"the tensor model {which} failed: {response.error().message()}")
            for r, _, _ in kept:
                answers[r] = pb_utils.InferenceResponse(error=error)
            return
        outputs = {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in self.outputs}
        at = 0
        for r, _, n in kept:
            answers[r] = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, np.ascontiguousarray(v[at : at + n])) for name, v in outputs.items()])
            at += n
