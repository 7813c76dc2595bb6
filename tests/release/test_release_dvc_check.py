"""`release build` refuses while the DVC pipeline behind the repository is stale (findings 1 and 3).

A six-stage DVC project shaped like this one (an always-changed probe writing a machine
record, the host record and the two source records, export, a per-target engine, choose reading
the host record, repository, bench) but with trivial commands, so real `dvc repro` runs in seconds. The real pipeline is covered by
tests/release/test_release_consistency.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.errors import ReleaseError
from pipeline.params import compose
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.promote import promote
from pipeline.release.store.store import ReleaseStore
from tests.helpers.markers import starts
from tests.helpers.project import ROOT, copy_checkout, sh
from tests.helpers.release_repo import bench_report, retrain_onnx
from tests.helpers.tiny_models import export_tiny_onnx

BASE = ["model=onnx", "model.name=tiny", "model.path=models/tiny.onnx"]

DVC_YAML = """\
stages:
  probe:
    cmd: >-
      python -m pipeline.stages.probe --params params.yaml --out machine/probe.json --model-record sources/model.json
      --data-record sources/data.json --host-record machine/host.json
    always_changed: true
    params: [model.path]
    outs:
      - machine/probe.json: {cache: false}
      - sources/model.json: {cache: false}
      - sources/data.json: {cache: false}
      - machine/host.json: {cache: false}
  export:
    cmd: python steps.py export
    deps: [steps.py, sources/model.json, sources/data.json]
    outs: [build/model.onnx]
  engine:
    foreach: [cpu]
    do:
      cmd: python steps.py engine ${item}
      deps: [machine/probe.json, build/model.onnx]
      outs: ["engines/${item}"]
  choose:
    cmd: python steps.py choose
    deps: [machine/host.json, build/model.onnx]
    params: [choose]
    outs: [choice.json]
  parity:
    cmd: python steps.py parity
    deps: [steps.py, build/model.onnx]
    outs: [parity.json]
  repository:
    cmd: python steps.py repository
    deps: [steps.py, build/model.onnx, engines, choice.json, parity.json]
    params: [variants]
    outs: [model_repository]
  bench:
    cmd: python steps.py bench
    deps: [model_repository]
    outs: [bench.json: {cache: false}]
"""

STEPS = """\
import shutil, sys, yaml
from pathlib import Path

step = sys.argv[1]
if step == "export":
    Path("build").mkdir(exist_ok=True)
    shutil.copyfile("models/tiny.onnx", "build/model.onnx")
elif step == "engine":
    Path("engines", sys.argv[2]).mkdir(parents=True, exist_ok=True)
    Path("engines", sys.argv[2], "manifest.json").write_text('{"status": "skipped"}')
elif step == "parity":
    from tests.helpers.release_repo import parity_report
    parity_report(Path("parity.json"), onnx=Path("build/model.onnx"))
elif step == "choose":
    Path("choice.json").write_text('{"precision": "fp32"}')
elif step == "repository":
    delay = yaml.safe_load(open("params.yaml"))["variants"]["throughput"]["dynamic_batching"]["max_queue_delay_us"]
    d = Path("model_repository/tiny")
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "configs").mkdir(exist_ok=True)
    shutil.copyfile("build/model.onnx", d / "1/model.onnx")
    base = 'name: "tiny"\\nbackend: "onnxruntime"\\nmax_batch_size: 8\\n'
    (d / "configs/latency.pbtxt").write_text(base)
    (d / "configs/throughput.pbtxt").write_text(base + "dynamic_batching { max_queue_delay_microseconds: %d }\\n" % delay)
    (d / "config.pbtxt").write_text(base)
elif step == "bench":
    Path("bench.json").write_text("{}")
"""


def run(cwd: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    """``cmd`` in the project, with this checkout importable (steps.py imports tests.helpers)."""
    return sh(cwd, *cmd, timeout=300, env={"PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
@starts("dvc")
def _built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project after its first `dvc repro` (built once; each test gets a copy)."""
    proj = tmp_path_factory.mktemp("dvc") / "proj"
    (proj / "models").mkdir(parents=True)
    export_tiny_onnx(str(proj / "models/tiny.onnx"))
    copy_checkout(proj, "conf")  # model.path is relative to the project that holds conf/
    (proj / "params.yaml").write_text(compose(BASE, proj / "conf"))
    (proj / "dvc.yaml").write_text(DVC_YAML)
    (proj / "steps.py").write_text(STEPS)
    run(proj, sys.executable, "-m", "dvc", "init", "--no-scm", "-q")
    run(proj, sys.executable, "-m", "dvc", "repro", "-q", "repository")
    return proj


@pytest.fixture
def project(_built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    proj = tmp_path / "proj"
    shutil.copytree(_built, proj, symlinks=True)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the source records are recomputed like the probe computes them
    return proj


def build(project: Path, store: ReleaseStore, repository: Path | None = None, parity: Path | None = None, unchecked: bool = False) -> dict:
    repo, parity = repository or project / "model_repository", parity or project / "parity.json"
    return build_release(
        store, BuildInputs(repo, parity, project / "bench.json", project / "dvc.lock", git_cwd=project), unchecked_evidence=unchecked, tag=False
    ).manifest.to_json()


def test_up_to_date_pipeline_builds_and_says_what_was_checked(project: Path, tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path / "store")
    (project / "machine/probe.json").write_text('{"gpus": ["another machine"]}')  # engines are guarded elsewhere
    dvc = build(project, store)["dvc"]
    assert dvc["checked"] is True and dvc["target"] == "repository" and dvc["project"] == str(project)
    assert dvc["stages"] == ["export", "parity", "choose", "repository"]  # transitive deps from DVC's graph; bench is downstream
    assert set(dvc["not_checked"]) == {"probe", "engine@cpu"} and "machine/probe.json" in dvc["not_checked"]["engine@cpu"]
    assert dvc["sources"] == {"data": "sources/data.json", "model": "sources/model.json"}


def test_committed_but_unrun_params_change_is_refused(project: Path, tmp_path: Path) -> None:
    """Finding 3: max_queue_delay_us=500 in params.yaml while throughput.pbtxt still says 2000."""
    store = ReleaseStore(tmp_path / "store")
    (project / "params.yaml").write_text(compose([*BASE, "variants.throughput.dynamic_batching.max_queue_delay_us=500"], project / "conf"))
    with pytest.raises(ReleaseError, match="is out of date: 1 stage") as e:
        build(project, store)
    msg = e.value.render()
    assert "repository: changed deps: params.yaml (variants modified)" in msg
    assert "fix: run `dvc repro repository`" in msg
    assert not (tmp_path / "store").exists()
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "repository")
    assert "max_queue_delay_microseconds: 500" in (project / "model_repository/tiny/configs/throughput.pbtxt").read_text()
    assert build(project, store)["dvc"]["checked"] is True


def test_model_file_rewritten_in_place_is_refused(project: Path, tmp_path: Path) -> None:
    """Finding 1: a retrained file at the same path changes no param and no dvc.lock entry; its source record catches it."""
    store = ReleaseStore(tmp_path / "store")
    retrain_onnx(project / "models/tiny.onnx")
    with pytest.raises(ReleaseError, match="is out of date") as e:
        build(project, store)
    msg = e.value.render()
    assert "probe: source record sources/model.json no longer matches the files it fingerprints: models/tiny.onnx changed (sha256" in msg
    assert "(export would rerun)" in msg and "dvc repro repository" in msg
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "repository")
    assert build(project, store)["dvc"]["checked"] is True


def test_a_stale_choice_is_refused(project: Path, tmp_path: Path) -> None:
    """choose reads the host record, which is not a machine record to skip: the choice was timed where the release is built."""
    store = ReleaseStore(tmp_path / "store")
    (project / "params.yaml").write_text(compose([*BASE, "choose.budget_s=30"], project / "conf"))
    with pytest.raises(ReleaseError, match="is out of date: 1 stage") as e:
        build(project, store)
    assert "choose: changed deps: params.yaml (choose modified)" in e.value.render()
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "repository")
    host = project / "machine/host.json"
    host.write_text(json.dumps({**json.loads(host.read_text()), "cores_available": 64}))  # another machine's record
    with pytest.raises(ReleaseError, match="is out of date: 1 stage") as e:
        build(project, store)
    assert "choose: changed deps: machine/host.json (modified)" in e.value.render() and "fix: run `dvc repro repository`" in e.value.render()
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "repository")  # the probe writes this machine's record again
    assert "choose" in build(project, store)["dvc"]["stages"]


def test_code_change_and_missing_record_are_refused(project: Path, tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path / "store")
    (project / "steps.py").write_text((project / "steps.py").read_text() + "# edited\n")
    with pytest.raises(ReleaseError, match="3 stage") as e:
        build(project, store)
    assert "export: changed deps: steps.py (modified)" in e.value.render() and "repository: changed deps: steps.py (modified)" in e.value.render()
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "repository")
    (project / "sources/data.json").unlink()
    with pytest.raises(ReleaseError, match="probe: its out sources/data.json is missing"):
        build(project, store)


def test_repository_inside_the_project_but_written_by_no_stage_is_refused(project: Path, tmp_path: Path) -> None:
    shutil.copytree(project / "model_repository", project / "elsewhere")
    with pytest.raises(ReleaseError, match="no stage writes it"):
        build(project, ReleaseStore(tmp_path / "store"), project / "elsewhere")


# ---------------------------------------------------------------- evidence bound to dvc.lock (issue 27, finding 5)
def test_swapped_evidence_is_refused_unless_unchecked_and_production_refuses_unchecked(project: Path, tmp_path: Path) -> None:
    """A parity copy (a failed entry relabelled), a repository copy with an edited config.pbtxt: not dvc.lock's outputs."""
    store = ReleaseStore(tmp_path / "store")
    copy = tmp_path / "parity-copy.json"
    copy.write_text((project / "parity.json").read_text().replace('"failed"', '"skipped"'))
    with pytest.raises(ReleaseError, match="not vouched for by dvc.lock") as e:
        build(project, store, parity=copy)
    assert f"--parity {copy} is not the output of any stage" in e.value.render() and "--unchecked-evidence" in e.value.render()
    outside = tmp_path / "repo-copy"
    shutil.copytree(project / "model_repository", outside)
    (outside / "tiny/config.pbtxt").write_text((outside / "tiny/config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 1"))
    with pytest.raises(ReleaseError, match="is not inside a DVC project"):
        build(project, store, repository=outside)
    assert not (tmp_path / "store").exists()  # nothing written

    # Edited in place: DVC's own check of the out against dvc.lock says so (parity is upstream of the repository).
    original = (project / "parity.json").read_text()
    (project / "parity.json").write_text(original.replace('"passed": true', '"passed": true '))
    with pytest.raises(ReleaseError, match="is out of date") as e:
        build(project, store)
    assert "parity: changed outs: parity.json (modified)" in e.value.render()
    (project / "parity.json").write_text(original)

    # --unchecked-evidence builds it, says so in the manifest, and production refuses it by default.
    m = build(project, store, repository=outside, unchecked=True)
    assert m["dvc"]["checked"] is False and m["dvc"]["unchecked_evidence"] is True and "not inside a DVC project" in m["dvc"]["reason"]
    store.checked_evidence_envs = ["production"]  # what the CLI sets from release.production_requires_checked_evidence
    promote(store, "staging", version=1)
    with pytest.raises(ReleaseError, match="evidence dvc.lock does not vouch for, and 'production' requires it") as e:
        promote(store, "production", version=1)
    assert "--allow-unchecked-evidence" in e.value.render() and not (tmp_path / "store/envs/production").exists()
    store.checked_evidence_envs = []  # --allow-unchecked-evidence
    assert promote(store, "production", version=1).version == 1

    # The pipeline's own outputs: bound by stage and md5.
    m = build(project, store)
    assert m["dvc"]["checked"] is True and m["dvc"]["evidence"]["parity"]["stage"] == "parity"
    assert m["dvc"]["evidence"]["parity"]["md5"] and m["dvc"]["evidence"]["repository"] == {"stage": "repository"}


def test_a_bench_edited_in_place_is_refused_and_a_stale_one_is_not_attached(project: Path, tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path / "store")
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "bench")
    (project / "bench.json").write_text('{"summary": {"latency_p50_ms": 0.001}}')
    with pytest.raises(ReleaseError, match="bench.json .bench's out. differs from dvc.lock"):
        build(project, store)
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "bench")
    m = build(project, store)
    assert m["bench"]["status"] == "absent" and m["dvc"]["evidence"]["bench"]["stage"] == "bench"  # "{}" measured nothing
    # The repository changes after the bench ran: the old bench is not attached, and the release says why.
    (project / "params.yaml").write_text(compose([*BASE, "variants.throughput.dynamic_batching.max_queue_delay_us=700"], project / "conf"))
    run(project, sys.executable, "-m", "dvc", "repro", "-q", "repository")
    m = build(project, store)
    assert m["bench"]["status"] == "absent" and "the bench stage is out of date (changed deps: model_repository" in m["bench"]["reason"], m["bench"]
    assert "run `dvc repro bench`" in m["bench"]["reason"]
    # A bench that fits these files, from another path: refused like any evidence dvc.lock does not name.
    fitting = bench_report(tmp_path / "bench-copy.json", project / "model_repository/tiny")
    with pytest.raises(ReleaseError, match="--bench .*bench-copy.json is not the output of any stage"):
        build_release(store, BuildInputs(project / "model_repository", project / "parity.json", fitting, project / "dvc.lock", git_cwd=project), tag=False)
