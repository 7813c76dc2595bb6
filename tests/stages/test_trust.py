"""What `dvc repro` builds is exactly what the inputs say: real DVC on throwaway copies of the project.

- a retrained checkpoint or edited model code at the same path reruns export and everything after it;
- unchanged files rerun nothing but the probe.

Elsewhere: a replaced ONNX file, the bench on a graph's own inputs, `dvc metrics show` and `dvc exp show`
(tests/release/test_release_consistency.py); another target's builder knob (tests/stages/test_dvc_pipeline.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from tests.helpers.project import DVC, MODEL_STAGES, Built, Recipe, ran, sh

CKPT = "examples/custom_model.safetensors"


def custom_checkpoint(project: Path) -> None:
    """The README's own-model example: its checkpoint written by its module."""
    sh(project, "python", "-m", "examples.custom_model", CKPT)


CUSTOM = Recipe("custom", ("model=example_custom",), custom_checkpoint, extra=("examples",))


def shipped(project: Path, name: str) -> str:
    return hashlib.sha256((project / "artifacts" / "model_repository" / name / "1" / "model.onnx").read_bytes()).hexdigest()


@pytest.fixture
def custom(built: Callable[[Recipe], Built]) -> Path:
    """The own-model example after its first `dvc repro repository`, which ran every model stage; unchanged files
    then rerun nothing but the probe."""
    project = built(CUSTOM)
    assert set(MODEL_STAGES) <= set(ran(project.first_repro)), project.first_repro
    assert ran(sh(project.path, *DVC, "repro", "repository").stdout) == ["probe"]
    return project.path


def test_a_retrained_checkpoint_reruns_export(custom: Path) -> None:
    """A retrain writes new weights to the same path: no param changes, the content does."""
    before = shipped(custom, "tabular")
    sh(
        custom,
        "python",
        "-c",
        f"import torch; from safetensors.torch import save_file; from examples.custom_model import build; torch.manual_seed(1); save_file(build().state_dict(), '{CKPT}')",
    )
    retrained = sh(custom, *DVC, "repro", "repository")
    assert set(MODEL_STAGES) <= set(ran(retrained.stdout)), retrained.stdout
    assert shipped(custom, "tabular") != before


def test_edited_model_code_reruns_export(custom: Path) -> None:
    """Edited model code (the factory's module, outside pipeline/): GELU -> ReLU."""
    before = shipped(custom, "tabular")
    src = custom / "examples" / "custom_model.py"
    src.write_text(src.read_text().replace("nn.GELU()", "nn.ReLU()"))
    edited = sh(custom, *DVC, "repro", "repository")
    assert set(MODEL_STAGES) <= set(ran(edited.stdout)), edited.stdout
    ops = {n.op_type for n in onnx.load(str(custom / "artifacts" / "model_repository" / "tabular" / "1" / "model.onnx")).graph.node}
    assert "Relu" in ops and shipped(custom, "tabular") != before
    report = json.loads((custom / "artifacts" / "reports" / "parity.json").read_text())
    assert report["passed"] and report["artifacts"]["fp32"]["sha256"] == shipped(custom, "tabular")
