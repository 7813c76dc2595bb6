"""The typed records of the release store: the manifest and the canary record read back what was written, key for key.

A manifest is never rewritten (a signature covers its bytes), so the record must hold everything the writer wrote;
stores written before a section existed must still read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.errors import ReleaseError
from pipeline.records.canary import (
    Agreement,
    Bounds,
    CanaryRecord,
    Check,
    ErrorCounts,
    LatencySummary,
    MetricsDelta,
    MetricsRow,
    ProductionCounts,
    Promotion,
    Round,
    SideLatency,
    TrafficSettings,
    Verdict,
)
from pipeline.records.release import ReleaseManifest, read_manifest
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import bench_report, canary_record, dvc_lock, parity_report, tiny_repository


def test_a_built_manifest_reads_back_byte_for_byte(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    store = ReleaseStore(tmp_path / "store")
    inputs = BuildInputs(repo, parity_report(tmp_path / "p.json"), bench_report(tmp_path / "b.json", repo / "tiny"), dvc_lock(tmp_path / "dvc.lock"), git_cwd=tmp_path)
    res = build_release(store, inputs, unchecked_evidence=True, tag=False)
    raw = (tmp_path / "store/releases/tiny/1/manifest.json").read_bytes()
    m = read_manifest(raw, "manifest.json")
    assert m == res.manifest and m.to_bytes() == raw
    assert list(json.loads(raw)) == ["schema", "model", "version", "created_at", "source", "files", "git", "dvc", "dvc_lock", "parity", "bench", "environment", "gto", "samples"]
    assert m.bench is not None and m.bench.measured and m.inconsistencies() == [] and m.variants() == ["latency", "throughput"]


def test_a_manifest_from_before_the_later_sections_still_reads() -> None:
    """The shape release build wrote before dvc, samples, parity.served and bench's status existed."""
    old = {
        "schema": 1,
        "model": "tiny",
        "version": 3,
        "created_at": "2025-06-01T10:00:00+00:00",
        "source": {"repository": "artifacts/model_repository/tiny", "source_version": "1"},
        "files": {"3/model.onnx": {"sha256": "a" * 64, "size": 10}, "configs/latency.pbtxt": {"sha256": "b" * 64, "size": 5}},
        "git": {"commit": "c0ffee", "branch": "main", "dirty": False, "toplevel": "/src"},
        "dvc_lock": {"repository": {"deps": {"x": "0123"}, "outs": {}}},
        "parity": {"pass": True, "report": "parity.json", "artifacts": {"fp32": {"pass": True}}},
        "bench": {"latency_p50_ms": 1.5},
        "environment": {"python": "3.11", "platform": "linux", "host": "h", "user": "u", "packages": {}},
        "gto": {"artifact": "tiny"},
    }
    m = read_manifest(json.dumps(old).encode(), "old.json")
    assert (m.model, m.version, m.commit, m.dvc, m.samples, m.gto_artifact) == ("tiny", 3, "c0ffee", None, None, "tiny")
    assert not m.evidence_checked and m.parity is not None and m.parity.served == {} and m.variants() == ["latency"]
    assert m.bench is not None and not m.bench.measured and m.bench.summary == {"latency_p50_ms": 1.5}
    assert m.inconsistencies() == []


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d.update(schema=2), "not a release manifest (schema 1)"),
        (lambda d: d["files"]["3/model.onnx"].pop("sha256"), "malformed release manifest"),
        (lambda d: d.update(version="3"), "not a release number"),
        (lambda d: d.pop("model"), "names model None"),
    ],
)
def test_a_manifest_that_is_not_one_is_one_message(edit, says: str) -> None:  # noqa: ANN001
    d = {"schema": 1, "model": "tiny", "version": 3, "files": {"3/model.onnx": {"sha256": "a" * 64, "size": 10}}}
    edit(d)
    with pytest.raises(ReleaseError, match=says.replace("(", r"\(").replace(")", r"\)")):
        ReleaseManifest.from_json(d, "m.json")
    with pytest.raises(ReleaseError, match="corrupt manifest"):
        read_manifest(b"{", "m.json")


def test_a_judged_canary_record_reads_back_key_for_key() -> None:
    side = SideLatency(100, 0, 2.0, 3.0)
    rec = canary_record(
        "passed",
        servers=["h:8000", "g:8000"],
        copies={"live": "tiny__canary_x-baseline", "candidate": "tiny__canary_x-candidate"},
        traffic=TrafficSettings("real", 4.0, 0.25, 40.0, 4, 8, ["release 2's samples"]),
        bounds=Bounds(1.25, 0.01, 20),
        by="u@h pid 1",
        notes=["a note"],
        outputs=Agreement("parity.fp32", 40, 8, True, {"y": {"passed": True, "max_abs": 0.0}}, []),
        latency=LatencySummary({"value": 1.0}, {"value": 1.0}, side, side, 3.9, 20, [Round(0.0, 25, 25, 2.0, 3.0, 2.0, 3.0)]),
        errors=ErrorCounts(0.0, 0, 100, 0, 100, ProductionCounts(0, 300, 150), {"candidate": {"success": 100, "fail": 0}}, []),
        metrics=MetricsDelta(True, {"candidate": MetricsRow(100, 0, 100, 90, 2.1, 0.1, 1.9)}),
        checks=[Check("outputs", True, "ok"), Check("latency", True, "ok"), Check("errors", True, "ok")],
        verdict=Verdict(True, "promoted: the pointer of 'dev' went 1 -> 2"),
        promotion=Promotion(1, 2, "copied", {"total_s": 1.0}, "tiny#dev#1"),
        finished_at="2026-01-01T10:01:00+00:00",
        timings={"total_s": 60.0},
    )
    data = json.loads(json.dumps(rec.to_json()))
    assert CanaryRecord.from_json(data) == rec
    assert data["promotion"]["from"] == 1 and data["metrics"] == {"available": True, "candidate": data["metrics"]["candidate"]}
    assert list(data) == [
        *("schema", "id", "model", "env", "live", "candidate", "variant", "status", "started_at", "server", "servers", "copies", "traffic", "bounds", "by", "notes"),
        *("outputs", "latency", "errors", "metrics", "checks", "verdict", "promotion", "finished_at", "timings"),
    ]
