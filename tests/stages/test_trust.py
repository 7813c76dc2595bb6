"""What `dvc repro` builds is exactly what the inputs say: real DVC on throwaway copies of the project.

- a retrained checkpoint or edited model code at the same path reruns export and everything after it;
- unchanged files rerun nothing but the probe (a replaced ONNX file: tests/release/test_release_consistency.py);
- the repository stage depends only on what it reads (another target's builder knob leaves it current);
- `dvc metrics show` loads every metrics file, and `dvc exp show` stays a readable width;
- `model=onnx` with inputs read from the graph runs through the bench, two inputs and two outputs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from tests.helpers.project import DVC, TWO, Built, Recipe, commit, ran, sh, write_params

MODEL_STAGES = ["export", "simplify", "fp16", "parity", "repository"]
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


@pytest.mark.triton  # the bench stage's tritonserver and perf_analyzer
def test_onnx_model_with_inputs_from_the_graph_runs_through_the_bench(built: Callable[[Recipe], Built]) -> None:
    fast_bench = [
        "bench.sweep.concurrency=[1,2]",
        "bench.sweep.measurement_interval_ms=200",  # the tiny graph answers thousands of requests in each
        "bench.max_trials=10",  # beside three busy test workers a window can swing: this test is about graph inputs
        "bench.sweep.stability_percentage=100",
        "bench.baseline.warmup_runs=5",
        "bench.baseline.runs=50",
        "bench.baseline.seconds=0.2",
        "bench.baseline.batch_sizes=[1,2]",
        "bench.profile=full",
        "bench.rounds.c1.min=0",
        "bench.rounds.throughput.min=0",  # the sweep alone: no rounds
    ]
    base = [*TWO.overrides, *fast_bench]
    two = built(TWO)  # built by `dvc repro repository`: every model stage ran
    assert set(MODEL_STAGES) <= set(ran(two.first_repro)), two.first_repro
    project = two.path
    write_params(project, base)
    commit(project, "a faster bench")
    out = sh(project, *DVC, "repro", timeout=900)
    assert "bench" in ran(out.stdout), out.stdout
    bench = json.loads((project / "artifacts" / "reports" / "bench.json").read_text())
    assert bench["model"]["name"] == "two" and bench["model"]["sha256"] == shipped(project, "two")
    assert bench["variants"]["latency"]["points"]["c1"]["valid"], bench["variants"]["latency"]["points"]["c1"]
    metrics = json.loads((project / "artifacts" / "metrics" / "bench.json").read_text())
    assert metrics == bench["summary"] and metrics["variants"]["latency"]["c1_p50_ms"] > 0

    # Every metrics file loads (a nested key named "error" used to make DVC report a load failure), and
    # the headline-only metrics keep `dvc exp show` to a width a terminal can show.
    shown = sh(project, *DVC, "metrics", "show")
    assert "failed to load" not in (shown.stdout + shown.stderr).lower(), shown.stdout + shown.stderr
    for name in ("export", "simplify", "fp16", "parity", "repository", "bench"):
        assert f"artifacts/metrics/{name}.json" in shown.stdout
    commit(project, "run")
    table = sh(project, *DVC, "exp", "show", "--no-pager", "--md").stdout
    cols = [c.strip() for c in next(ln for ln in table.splitlines() if ln.startswith("|")).strip("|").split("|")]
    metric_cols = cols[cols.index("Created") + 1 : next(i for i, c in enumerate(cols) if c.startswith("model."))]
    # was 749 when whole reports were metrics; each stage adds its own headline (the tune stage, one column while off)
    assert 20 <= len(metric_cols) <= 64, "\n".join(metric_cols)

    # One built project for the next checks too: a second would rebuild the same chain. Unchanged files rerun
    # nothing but the probe (a replaced ONNX file at the same path reruns the model stages: test_release_consistency).
    assert ran(sh(project, *DVC, "repro", "repository").stdout) == ["probe"]

    # The fleet is [cpu]: an a100 builder knob is no input of the repository stage (nor of anything else).
    write_params(project, [*base, "target_specs.a100.builder.workspace_mb=1024"])
    status = sh(project, *DVC, "status", "repository").stdout
    assert "repository" not in status and "export" not in status, status
