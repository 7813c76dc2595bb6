"""What `dvc repro` builds is exactly what the inputs say: real DVC on throwaway copies of the project.

- a retrained checkpoint or edited model code at the same path reruns export and everything after it;
- a replaced ONNX file at the same model.path does too; unchanged files rerun nothing but the probe;
- the repository stage depends only on what it reads (another target's builder knob leaves it current);
- `dvc metrics show` loads every metrics file, and `dvc exp show` stays a readable width;
- `model=onnx` with inputs read from the graph runs through the bench, two inputs and two outputs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import onnx
import pytest

from tests.helpers.dvc_project import DVC, commit, make_project, ran, sh, write_params
from tests.helpers.tiny_models import two_io_onnx

pytestmark = pytest.mark.slow
MODEL_STAGES = ["export", "simplify", "fp16", "parity", "repository"]


def shipped(project: Path, name: str) -> str:
    return hashlib.sha256((project / "artifacts" / "model_repository" / name / "1" / "model.onnx").read_bytes()).hexdigest()


def model_file(project: Path) -> None:
    """models/two.onnx: two inputs and two outputs, inputs read from the graph (model=onnx lists none)."""
    (project / "models").mkdir()
    two_io_onnx(str(project / "models" / "two.onnx"), seed=0)


def test_retrained_checkpoint_and_edited_code_rerun_export(tmp_path: Path) -> None:
    ckpt = "examples/custom_model.safetensors"
    project = make_project(tmp_path / "proj", ["model=example_custom"], extra=("examples",), prepare=lambda p: sh(p, "python", "-m", "examples.custom_model", ckpt))
    commit(project, "init")
    first = sh(project, *DVC, "repro", "repository")
    assert set(MODEL_STAGES) <= set(ran(first.stdout)), first.stdout
    before = shipped(project, "tabular")
    assert ran(sh(project, *DVC, "repro", "repository").stdout) == ["probe"]

    # A retrain writes new weights to the same path: no param changes, the content does.
    sh(
        project,
        "python",
        "-c",
        f"import torch; from safetensors.torch import save_file; from examples.custom_model import build; torch.manual_seed(1); save_file(build().state_dict(), '{ckpt}')",
    )
    retrained = sh(project, *DVC, "repro", "repository")
    assert set(MODEL_STAGES) <= set(ran(retrained.stdout)), retrained.stdout
    after = shipped(project, "tabular")
    assert after != before

    # Edited model code (the factory's module, outside pipeline/): GELU -> ReLU.
    src = project / "examples" / "custom_model.py"
    src.write_text(src.read_text().replace("nn.GELU()", "nn.ReLU()"))
    edited = sh(project, *DVC, "repro", "repository")
    assert set(MODEL_STAGES) <= set(ran(edited.stdout)), edited.stdout
    ops = {n.op_type for n in onnx.load(str(project / "artifacts" / "model_repository" / "tabular" / "1" / "model.onnx")).graph.node}
    assert "Relu" in ops and shipped(project, "tabular") != after
    report = json.loads((project / "artifacts" / "reports" / "parity.json").read_text())
    assert report["passed"] and report["artifacts"]["fp32"]["sha256"] == shipped(project, "tabular")


def test_onnx_model_with_inputs_from_the_graph_runs_through_the_bench_and_reruns_on_a_replaced_file(tmp_path: Path) -> None:
    fast_bench = [
        "bench.sweep.concurrency=[1,2]",
        "bench.sweep.measurement_interval_ms=500",
        "bench.max_trials=6",
        "bench.sweep.stability_percentage=50",
        "bench.baseline.warmup_runs=5",
        "bench.baseline.runs=50",
        "bench.baseline.seconds=0.2",
        "bench.baseline.batch_sizes=[1,2]",
        "bench.profile=full",
        "bench.rounds.c1.min=0",
        "bench.rounds.throughput.min=0",  # the sweep alone: no rounds
    ]
    base = ["model=onnx", "model.name=two", "model.path=models/two.onnx", *fast_bench]
    project = make_project(tmp_path / "proj", base, prepare=model_file)
    commit(project, "init")
    out = sh(project, *DVC, "repro", timeout=900)
    assert {*MODEL_STAGES, "bench"} <= set(ran(out.stdout)), out.stdout
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
    assert 20 <= len(metric_cols) <= 60, "\n".join(metric_cols)  # was 749 when whole reports were metrics

    # One built project for the next checks too: a second would rebuild the same chain.
    # Unchanged files rerun nothing but the probe; a replaced ONNX at the same model.path reruns the model stages.
    before = shipped(project, "two")
    assert ran(sh(project, *DVC, "repro", "repository").stdout) == ["probe"]
    two_io_onnx(str(project / "models" / "two.onnx"), seed=1)  # new weights, same path
    replaced = sh(project, *DVC, "repro", "repository")
    assert set(MODEL_STAGES) <= set(ran(replaced.stdout)), replaced.stdout
    assert shipped(project, "two") != before

    # The fleet is [cpu]: an a100 builder knob is no input of the repository stage (nor of anything else).
    write_params(project, [*base, "target_specs.a100.builder.workspace_mb=1024"])
    status = sh(project, *DVC, "status", "repository").stdout
    assert "repository" not in status and "export" not in status, status
