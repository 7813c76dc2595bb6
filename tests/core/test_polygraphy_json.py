"""Polygraphy runs in the stages without importing torch (about 1.1 s of CPU per stage process), with the same answers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.conftest import ROOT

# A calibration set saved and read back (the calibrate and int8 stages), then an ONNX Runtime run compared by
# Polygraphy's Comparator (the parity stage), in a fresh interpreter: torch must stay unimported throughout.
SCRIPT = """
import sys
from pathlib import Path
import numpy as np
from pipeline.convert import calibration
from pipeline.parity import polygraphy as pg
from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
from polygraphy.comparator import Comparator
from tests.tiny_triton import tiny_onnx

tmp = Path(sys.argv[1])
feeds = [{"x": np.random.default_rng(i).standard_normal((2, 16)).astype(np.float32)} for i in range(3)]
calibration.save(feeds, tmp / "samples.json")
back = calibration.load(tmp / "samples.json")
assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(feeds, back))
model = tiny_onnx(tmp / "tiny.onnx")
runners = [OnnxrtRunner(SessionFromOnnx(str(model)), name=n) for n in ("a", "b")]
results = Comparator.run(runners, data_loader=back)
assert bool(Comparator.compare_accuracy(results))
print("torch imported:", "torch" in sys.modules)
"""


def test_calibration_files_and_comparisons_never_import_torch(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "torch imported: False" in res.stdout, res.stdout


def test_torch_tensors_are_still_recognised_once_torch_is_imported() -> None:
    import torch
    from polygraphy.util import array

    from pipeline.core.polygraphy_json import numpy_first

    numpy_first()
    assert array.is_torch(torch.zeros(2)) and not array.is_torch(np.zeros(2)) and not array.is_torch([0.0])
