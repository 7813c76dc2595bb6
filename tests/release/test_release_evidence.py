"""A release ships only files its reports vouch for by sha256 (finding 4): parity refuses, bench is recorded absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.errors import ReleaseError
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import ONNX_BYTES, bench_report, dvc_lock, parity_report, sha256, tiny_repository


def _build(tmp_path: Path, repo: Path, parity: Path, bench: Path | None = None, model: str | None = None):  # noqa: ANN202
    return build_release(
        ReleaseStore(tmp_path / "store"), BuildInputs(repo, parity, bench, dvc_lock(tmp_path / "dvc.lock"), git_cwd=tmp_path), model=model, unchecked_evidence=True, tag=False
    )


def test_parity_of_another_model_is_refused_naming_both_shas(tmp_path: Path) -> None:
    """model=cnn + `dvc repro parity` while the repository still holds the previous model."""
    repo = tiny_repository(tmp_path / "repo")
    cnn = parity_report(tmp_path / "parity.json", onnx=b"the cnn model", model="cnn")
    report = json.loads(cnn.read_text())
    for art in report["artifacts"].values():
        art["outputs"] = {"logits": art["outputs"]["y"]}
    cnn.write_text(json.dumps(report))
    with pytest.raises(ReleaseError, match="the parity report does not vouch for the files this release ships") as e:
        _build(tmp_path, repo, cnn)
    msg = e.value.render()
    assert sha256(ONNX_BYTES)[:12] in msg and sha256(b"the cnn model")[:12] in msg
    assert "parity compared ['logits'], the release serves ['y']" in msg and "report's model: cnn" in msg
    assert "dvc repro parity repository" in msg
    assert not (tmp_path / "store").exists()


def test_parity_entry_must_have_passed_and_carry_a_sha(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    # The served bytes match only the fp16 entry, which is skipped: nothing that passed vouches for them.
    p = parity_report(tmp_path / "p.json", onnx=b"other")
    report = json.loads(p.read_text())
    report["artifacts"]["fp16"] = {"status": "skipped", "passed": None, "sha256": sha256(ONNX_BYTES), "reason": "no GPU"}
    p.write_text(json.dumps(report))
    with pytest.raises(ReleaseError, match="parity failed for a file this release ships") as e:
        _build(tmp_path, repo, p)
    assert "model.onnx is the fp16 artifact, and it did not pass: parity skipped: no GPU" in e.value.render()
    # A report written before parity recorded sha256 vouches for nothing.
    for art in report["artifacts"].values():
        art.pop("sha256", None)
    report["artifacts"]["fp16"] = {**report["artifacts"]["fp32"]}
    p.write_text(json.dumps(report))
    with pytest.raises(ReleaseError, match="matches no passed ONNX artifact") as e:
        _build(tmp_path, repo, p)
    assert "fp32 no sha256 (passed)" in e.value.render()


def test_served_file_may_match_the_fp16_entry(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo", onnx=b"fp16 " + ONNX_BYTES)  # a GPU target serves the FP16 ONNX
    r = _build(tmp_path, repo, parity_report(tmp_path / "p.json"))
    assert r.manifest.to_json()["parity"]["served"] == {"model.onnx": {"sha256": sha256(b"fp16 " + ONNX_BYTES), "artifact": "fp16"}}


def test_tensorrt_plans_must_match_passed_engine_entries(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo", name="tiny_trt")
    (repo / "tiny_trt/1/model.onnx").unlink()
    (repo / "tiny_trt/1/model.sm80.plan").write_bytes(b"a100 engine")
    p = parity_report(tmp_path / "p.json")
    report = json.loads(p.read_text())
    report["artifacts"]["trt@a100"] = {**report["artifacts"]["fp32"], "file": "artifacts/engines/a100/model.plan", "sha256": sha256(b"a100 engine")}
    p.write_text(json.dumps(report))
    r = _build(tmp_path, repo, p)
    assert r.manifest.to_json()["parity"]["served"] == {"model.sm80.plan": {"sha256": sha256(b"a100 engine"), "artifact": "trt@a100"}}
    # A plan whose bytes parity compared as an ONNX file, or never compared, is refused.
    (repo / "tiny_trt/1/model.sm80.plan").write_bytes(ONNX_BYTES)
    with pytest.raises(ReleaseError, match="model.sm80.plan sha256 .* matches no passed TensorRT artifact"):
        _build(tmp_path, repo, p)


def test_a_repository_without_a_compared_model_file_is_refused(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    (repo / "tiny/1/model.onnx").unlink()
    with pytest.raises(ReleaseError, match="holds no model.onnx or TensorRT plan"):
        _build(tmp_path, repo, parity_report(tmp_path / "p.json"))


@pytest.mark.parametrize(
    "case, reason",
    [
        ("other model", "measured model 'minilm', not 'tiny'"),
        ("other onnx", "measured a model.onnx with sha256"),
        ("other variant file", "measured the variants on other ONNX files than the release ships"),
        ("other config", "measured other config variants than the release ships (differ: throughput)"),
        ("no summary", "has no summary"),
        ("missing", "no bench report at"),
        ("not json", "is not readable JSON"),
    ],
)
def test_bench_of_other_files_is_recorded_absent(tmp_path: Path, case: str, reason: str) -> None:
    """The tabular release must not embed the MiniLM bench: absent with the reason, and the build succeeds."""
    repo = tiny_repository(tmp_path / "repo")
    bench = bench_report(tmp_path / "bench.json", repo / "tiny", name="minilm" if case == "other model" else None)
    report = json.loads(bench.read_text())
    if case == "other onnx":
        report["model"]["sha256"] = sha256(b"minilm.onnx")
    elif case == "other variant file":
        report["model"]["files_sha256"] = {"latency": report["model"]["sha256"], "throughput": sha256(b"model.int8.onnx")}
    elif case == "other config":
        report["model"]["configs_sha256"]["throughput"] = sha256(b"max_queue_delay 500")
    elif case == "no summary":
        del report["summary"]
    bench.write_text(json.dumps(report))
    if case == "missing":
        bench.unlink()
    elif case == "not json":
        bench.write_text("{")
    m = _build(tmp_path, repo, parity_report(tmp_path / "p.json"), bench).manifest.to_json()
    assert m["bench"]["status"] == "absent" and reason in m["bench"]["reason"]
    assert "summary" not in m["bench"]


def test_bench_of_exactly_these_files_embeds_only_its_summary(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    bench = bench_report(tmp_path / "bench.json", repo / "tiny", summary={"ratios": {"latency_c1": 1.05}})
    m = _build(tmp_path, repo, parity_report(tmp_path / "p.json"), bench).manifest.to_json()
    assert m["bench"] == {
        "status": "measured",
        "report": str(bench),
        "model_sha256": sha256(ONNX_BYTES),
        "summary": {"ratios": {"latency_c1": 1.05}},
        "configs_sha256": {v: sha256(repo / f"tiny/configs/{v}.pbtxt") for v in ("latency", "throughput")},
    }


def test_a_second_onnx_file_needs_its_own_parity_entry(tmp_path: Path) -> None:
    """Variants serving different precisions ship model.onnx and model.<precision>.onnx: parity must vouch for both."""
    repo = tiny_repository(tmp_path / "repo")
    (repo / "tiny/1/model.int8.onnx").write_bytes(b"an int8 file no parity entry compared")
    with pytest.raises(ReleaseError, match="the parity report does not vouch for the files this release ships") as e:
        _build(tmp_path, repo, parity_report(tmp_path / "p.json"))
    assert "model.int8.onnx" in e.value.render()
    assert not (tmp_path / "store").exists()
