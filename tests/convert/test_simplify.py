"""The simplify stage imports onnxsim with torch held off, and simplifies exactly as with torch imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline.convert.simplify import simplify
from pipeline.core.config import load_config
from tests.helpers.project import ROOT, composed
from tests.helpers.tiny_models import two_io_onnx

# A fresh interpreter: argv[1] the params, argv[2] the ONNX file, argv[3] the output.
SCRIPT = """
import sys
from pathlib import Path
from pipeline.convert.simplify import import_onnxsim, simplify
from pipeline.core.config import load_config

onnxsim = import_onnxsim()
held_off = "torch" not in sys.modules
cfg = load_config(Path(sys.argv[1]))
report = simplify(Path(sys.argv[2]), Path(sys.argv[3]), cfg.simplify, cfg.model)
import torch  # works after the import: torch was held off for onnxsim's import alone

print(held_off, report["nodes_after"], onnxsim.ppq_integration.PPQ_AVAILABLE, torch.__name__)
"""


def test_onnxsim_without_torch_simplifies_as_with_it(tmp_path: Path) -> None:
    src = Path(two_io_onnx(str(tmp_path / "two.onnx")))
    params = tmp_path / "params.yaml"
    params.write_text(composed(["model=onnx", "model.name=two", f"model.path={src}"]), encoding="utf-8")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(params), str(src), str(tmp_path / "held_off.onnx")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[-1].split() == ["True", "4", "False", "torch"], r.stdout  # after onnxsim's "Checking i/n..." lines
    # Here torch is imported (the test helpers use it): onnxsim as usual, and the same bytes.
    assert "torch" in sys.modules
    cfg = load_config(params)
    simplify(src, tmp_path / "with_torch.onnx", cfg.simplify, cfg.model)
    assert (tmp_path / "held_off.onnx").read_bytes() == (tmp_path / "with_torch.onnx").read_bytes()
