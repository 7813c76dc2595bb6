"""A python-backend model for the serving tests: y = 2x, optionally slow (a fixed time per execution) or leaky.

``sleep_s`` makes its capacity known (max_batch_size / sleep_s requests per second with a full batch), so overload
is a rate a Python client can offer; ``leak_bytes`` keeps that many touched bytes per request forever, the
deliberate leak the soak's detector must flag.
"""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.serving.install import site_packages

MODEL_PY = """\
import json, os, sys, time
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sys_path.json")) as f:
    sys.path[:0] = json.load(f)  # the stub ignores PYTHONPATH
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        p = json.loads(args["model_config"]).get("parameters", {})
        self.sleep_s = float(p.get("sleep_s", {}).get("string_value", "0"))
        self.leak = int(p.get("leak_bytes", {}).get("string_value", "0"))
        self.kept = []

    def execute(self, requests):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "x").as_numpy()
            if self.leak:
                self.kept.append(np.ones(self.leak, np.uint8))  # written, so resident: a real leak
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", (x * 2).astype(np.float32))]))
        return out
"""


def python_model(
    root: Path, name: str, *, sleep_s: float = 0.0, leak_bytes: int = 0, max_batch_size: int = 4, max_queue_size: int = 0, instances: int = 1, queue_delay_us: int = 1000
) -> Path:
    """``root/<name>/`` with config.pbtxt (dynamic batching up to max_batch_size) and 1/model.py; returns the repository root."""
    d = root / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "1" / "model.py").write_text(MODEL_PY)
    (d / "1" / "sys_path.json").write_text(json.dumps([str(p) for p in site_packages()]))
    cfg = mc.ModelConfig(name=name, backend="python", max_batch_size=max_batch_size)
    cfg.input.add(name="x", data_type=mc.TYPE_FP32, dims=[4])
    cfg.output.add(name="y", data_type=mc.TYPE_FP32, dims=[4])
    cfg.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    cfg.dynamic_batching.max_queue_delay_microseconds = queue_delay_us
    if max_queue_size:
        cfg.dynamic_batching.default_queue_policy.max_queue_size = max_queue_size
    cfg.parameters["sleep_s"].string_value = str(sleep_s)
    cfg.parameters["leak_bytes"].string_value = str(leak_bytes)
    (d / "config.pbtxt").write_text(text_format.MessageToString(cfg))
    return root
