"""The engine CI flow (.github/workflows/engines.yml), replayed here through a DVC remote on a real S3 API.

Each job runs its script from scripts/ci/ in its own clone, in the workflow's order, with the fleet
[cpu, a100, h100]; handoffs between jobs are the files the workflow uploads as artifacts. Without a GPU the
family jobs push `skipped` manifests, and assemble leaves those engines out with the reason. A GPU runner runs
exactly these scripts, with --require-engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.project import DVC, ROOT, commit, make_project, sh
from tests.helpers.tiny_models import two_io_onnx

FLEET = "[cpu,a100,h100]"


def project_with_default_model(p: Path) -> None:
    """The user's own model as the project's default (the onnx job composes conf/ with only the fleet)."""
    (p / "models").mkdir()
    two_io_onnx(str(p / "models" / "two.onnx"))
    (p / "conf" / "model" / "two.yaml").write_text(
        "name: two\nsource: onnx\npath: models/two.onnx\n",
        encoding="utf-8",  # the rest from the schema's defaults
    )
    cfg = p / "conf" / "config.yaml"
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("  - model: minilm\n", "  - model: two\n"), encoding="utf-8")


@pytest.mark.dvc
def test_engine_jobs_through_the_remote_assemble_one_repository(tmp_path: Path, s3) -> None:  # noqa: ANN001 - fixture
    bucket = s3.bucket("ci-remote")
    origin = make_project(tmp_path / "origin", [], extra=("scripts",), prepare=project_with_default_model)
    sh(origin, *DVC, "remote", "add", "-d", "store", f"s3://{bucket}/cache")
    sh(origin, *DVC, "remote", "modify", "store", "endpointurl", s3.endpoint)
    commit(origin, "project")

    def clone(name: str) -> Path:
        sh(tmp_path, "git", "clone", "-q", str(origin), str(tmp_path / name))
        return tmp_path / name

    handoff = tmp_path / "handoff"
    onnx = clone("job-onnx")
    sh(onnx, "bash", "scripts/ci/onnx-job.sh", FLEET, str(handoff / "onnx-lock"), env=s3.env)
    for target in ("a100", "h100"):
        job = clone(f"job-{target}")
        out = sh(job, "bash", "scripts/ci/engine-job.sh", target, str(handoff / "onnx-lock"), str(handoff / "gpu-jobs" / f"gpu-{target}"), env=s3.env)
        assert "Running stage 'export'" not in out.stdout, "an engine job must build from the pulled ONNX, never rebuild it"
        manifest = json.loads((handoff / "gpu-jobs" / f"gpu-{target}" / "artifacts" / "engines" / target / "manifest.json").read_text())
        assert manifest["status"] == "skipped" and manifest["target"] == target
        if target == "a100":  # the same script and check for every family: one is enough
            # On its own runner a skipped engine is an error: that is what the GPU jobs pass.
            again = sh(job, "bash", "scripts/ci/engine-job.sh", target, str(handoff / "onnx-lock"), str(tmp_path / "unused"), "--require-engine", check=False, env=s3.env)
            assert again.returncode != 0 and f"engine@{target} was skipped on its own runner" in again.stderr

    assemble = clone("job-assemble")
    res = sh(assemble, "bash", "scripts/ci/assemble-job.sh", str(handoff / "onnx-lock"), str(handoff / "gpu-jobs"), env=s3.env)
    assert "| a100 | skipped |" in res.stdout and "| h100 | skipped |" in res.stdout, res.stdout
    lock = yaml.safe_load((assemble / "dvc.lock").read_text())
    assert {"engine@a100", "engine@h100"} <= set(lock["stages"])
    served = assemble / "artifacts" / "model_repository" / "two" / "1" / "model.onnx"
    assert served.read_bytes() == (onnx / "artifacts" / "onnx" / "model.fp32.onnx").read_bytes()
    assert not (assemble / "artifacts" / "model_repository" / "two_trt").exists()
    report = json.loads((assemble / "artifacts" / "reports" / "repository.json").read_text())
    assert set(report["engines"]["excluded"]) >= {"a100", "h100"}
    assert all(r.startswith("skipped") for t, r in report["engines"]["excluded"].items() if t != "cpu"), report["engines"]["excluded"]


def test_workflow_calls_the_job_scripts() -> None:
    """engines.yml runs the same scripts the test replays (a step that bypassed them would not be tested)."""
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "engines.yml").read_text())
    runs = {job: "\n".join(s.get("run", "") for s in body["steps"]) for job, body in wf["jobs"].items()}
    assert "scripts/ci/onnx-job.sh" in runs["onnx"]
    assert "scripts/ci/engine-job.sh" in runs["engines"] and "--require-engine" in runs["engines"]
    assert "scripts/ci/assemble-job.sh" in runs["assemble"]
