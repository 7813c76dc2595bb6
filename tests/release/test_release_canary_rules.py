"""The canary without a server: its refusals, its arithmetic, its verdict, its record.

Everything here must fail (or decide) before a request is sent, so it runs in seconds; the canary on
a real tritonserver is tests/release/test_release_canary.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import ConfigProblems, ParityConfig, ToleranceConfig
from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.errors import ConfigError, ReleaseError
from pipeline.params import compose
from pipeline.records.canary import Agreement, Bounds, CanaryRecord, Check, ErrorCounts, ProductionCounts, TrafficSettings, Verdict
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.canary import report as cr
from pipeline.release.canary import traffic as ct
from pipeline.release.canary.prepare import Candidate, checked, signature
from pipeline.release.canary.run import run_canary
from pipeline.release.promote import SwitchOptions, promote
from pipeline.release.store import canaries
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import canary_record, dvc_lock, parity_report, sample_inputs, standin_repository, tiny_repository

UNREACHABLE = "127.0.0.1:1"  # nothing listens there: a check that passed it never contacted a server


def store_with(tmp: Path, *repos: Path, inputs: Path | None = None) -> ReleaseStore:
    tmp.mkdir(parents=True, exist_ok=True)
    store = ReleaseStore(tmp / "store")
    lock = dvc_lock(tmp / "dvc.lock")
    for i, repo in enumerate(repos, 1):
        onnx = repo / "tiny/1/model.onnx"
        build_release(store, BuildInputs(repo, parity_report(tmp / f"parity{i}.json", onnx=onnx, inputs=inputs), None, lock, git_cwd=tmp), unchecked_evidence=True, tag=False)
    return store


@pytest.fixture
def two(tmp_path: Path) -> ReleaseStore:
    """Releases 1 and 2 of the stand-in (with samples), 1 live in dev."""
    inputs = sample_inputs(tmp_path / "inputs.json")
    store = store_with(tmp_path, standin_repository(tmp_path / "a", 1), standin_repository(tmp_path / "b", 2), inputs=inputs)
    promote(store, "dev", version=1)
    return store


def canary(store: ReleaseStore, version: int, servers: str = UNREACHABLE, **kw: object) -> None:
    run_canary(store, Candidate("dev", version), SwitchOptions.of(servers), CanaryConfig(), ParityConfig(), **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- refusals before anything loads
def test_release_build_ships_the_parity_samples(two: ReleaseStore, tmp_path: Path) -> None:
    m = two.manifest("tiny", 2)
    assert "samples/inputs.json" in m.files and m.samples is not None and m.samples.status == "shipped"
    assert two.verify_release("tiny", 2) and not any(p.startswith("samples/") for p in two.fs.walk_files("envs/dev/tiny/1"))
    bare = store_with(tmp_path / "bare", standin_repository(tmp_path / "c", 1))
    samples = bare.manifest("tiny", 1).samples
    assert samples is not None and samples.status == "absent"


def test_candidate_not_in_store(two: ReleaseStore) -> None:
    with pytest.raises(ReleaseError, match="release version 7 of 'tiny' does not exist") as e:
        canary(two, 7)
    assert "[1, 2]" in e.value.render()


def test_nothing_live_and_already_live(two: ReleaseStore) -> None:
    with pytest.raises(ReleaseError, match="already live"):
        canary(two, 1)
    with pytest.raises(ReleaseError, match="nothing is live in 'staging'"):
        run_canary(two, Candidate("staging", 2), SwitchOptions.of(UNREACHABLE), CanaryConfig(), ParityConfig())
    with pytest.raises(ReleaseError, match="--reload"):
        canary(two, 2, servers="")


def test_different_signature_is_refused_before_any_server_is_contacted(tmp_path: Path) -> None:
    inputs = sample_inputs(tmp_path / "inputs.json")
    store = store_with(tmp_path, standin_repository(tmp_path / "a", 1), tiny_repository(tmp_path / "b"), inputs=inputs)  # x[16]->y[8], x[4]->y[4]
    promote(store, "dev", version=1)
    with pytest.raises(ReleaseError, match="does not take and return what live version 1 does") as e:
        canary(store, 2)
    text = e.value.render()
    assert "x: FP32[16]" in text and "x: FP32[4]" in text and "y: FP32[8]" in text
    assert canaries.read(store.fs, "dev", "tiny") is None and store.env_state("dev", "tiny").present == [1]


def test_no_samples_to_replay(tmp_path: Path) -> None:
    store = store_with(tmp_path, standin_repository(tmp_path / "a", 1), standin_repository(tmp_path / "b", 1))
    promote(store, "dev", version=1)
    with pytest.raises(ReleaseError, match="carry no samples to replay") as e:
        canary(store, 2)
    assert "--inputs" in (e.value.fix or "")
    with pytest.raises(ReleaseError, match="cannot reach Triton at 127.0.0.1:1"):  # with --inputs it gets as far as the server
        canary(store, 2, inputs=sample_inputs(tmp_path / "extra.json"))
    (tmp_path / "bad.json").write_text(json.dumps([{"z": 1}]))
    with pytest.raises(ReleaseError, match="cannot read --inputs|lack inputs"):
        canary(store, 2, inputs=tmp_path / "bad.json")


def test_impossible_thresholds_fail_at_composition_and_on_the_command_line() -> None:
    for override, key in (
        ("release.canary.max_p99_ratio=-1", "release.canary.max_p99_ratio"),
        ("release.canary.max_error_rate=-0.1", "release.canary.max_error_rate"),
        ("release.canary.rounds=1", "release.canary.rounds"),
        ("release.canary.duration_s=0", "release.canary.duration_s"),
        ("release.canary.share=1", "release.canary.share"),
    ):
        with pytest.raises(ConfigError) as e:
            compose([override])
        assert isinstance(e.value, ConfigProblems) and [p.key for p in e.value.problems] == [key], e.value.render()
    with pytest.raises(ConfigProblems, match=r"release.canary.share=0.6: must be in \(0, 0.5\]"):
        checked(CanaryConfig(), traffic="real", share=0.6)
    with pytest.raises(ConfigProblems, match="requests per round") as e:
        checked(CanaryConfig(), traffic="real", share=0.01, duration_s=10)
    assert "raise release.canary.duration_s to 500" in e.value.render()
    with pytest.raises(ConfigProblems, match="not one of"):
        checked(CanaryConfig(), traffic="mirror")
    assert checked(CanaryConfig(), traffic="real", duration_s=60).traffic is CanaryTraffic.real
    assert "release:" in compose([]) and "max_p99_ratio: 1.25" in compose([])


def test_cli_refusals_are_one_message(two: ReleaseStore, tmp_path: Path) -> None:
    base = ["release", "canary", "--env", "dev", "--store", str(two.url), "--params", str(tmp_path / "none.yaml"), "--no-tag"]
    for extra, needle, code in (
        (["--reload", UNREACHABLE], "needs the candidate's --version", 2),
        (["--version", "2", "--reload", UNREACHABLE, "--duration", "soon"], "--duration 'soon' is not a duration", 2),
        (["--version", "2", "--reload", UNREACHABLE, "--share", "0"], "release.canary.share=0", 2),
        (["--version", "2", "--reload", UNREACHABLE], "cannot reach Triton at 127.0.0.1:1", 2),
    ):
        r = CliRunner().invoke(app, [*base, *extra])
        assert r.exit_code == code and needle in r.output and "Traceback" not in r.output, r.output


# ---------------------------------------------------------------- rounds, outputs, verdict, record
def sent(side: str, start: float, n: int, ms: float, step: float = 0.01) -> list[ct.Sent]:
    return [ct.Sent(side, start + i * step, ms + (i % 7) * 0.01 * ms) for i in range(n)]


def test_paired_rounds() -> None:
    same = sent(ct.LIVE, 0, 400, 2.0) + sent(ct.CANDIDATE, 0.005, 400, 2.0)
    lat = ct.paired_rounds(same, 5, 20)
    assert lat.p99_ratio.n == 5 and lat.p99_ratio.value == pytest.approx(1.0, abs=0.01)
    slow = sent(ct.LIVE, 0, 400, 2.0) + sent(ct.CANDIDATE, 0.005, 400, 6.0)
    assert ct.paired_rounds(slow, 5, 20).p99_ratio.value == pytest.approx(3.0, rel=0.01)
    sparse = ct.paired_rounds(sent(ct.LIVE, 0, 400, 2.0) + sent(ct.CANDIDATE, 0.005, 40, 2.0, step=0.1), 5, 20)
    assert sparse.p99_ratio.n == 0 and sparse.p99_ratio.left_out == 5  # 8 candidate answers a round: no p99 from them
    # Only the time both sides were served counts; warm-up requests and failures give no latency.
    shifted = sent(ct.LIVE, 0, 400, 2.0) + sent(ct.CANDIDATE, 2.0, 400, 2.0) + [ct.Sent(ct.CANDIDATE, 3.0, None), ct.Sent(ct.LIVE, 0.5, 99.0, timed=False)]
    lat = ct.paired_rounds(shifted, 4, 10)
    assert lat.window_s == pytest.approx(1.99, abs=0.02) and lat.candidate.errors == 1 and lat.live.requests == 400


def pairs(live: list[np.ndarray], cand: list[np.ndarray]) -> ct.OutputPairs:
    p = ct.OutputPairs(["y"])
    for i, (a, b) in enumerate(zip(live, cand)):
        p.add(i % 2, {"y": a}, {"y": b})
    return p


def test_agreement_uses_the_parity_comparison() -> None:
    rng = np.random.default_rng(0)
    ys = [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(2)] * 3
    same = cr.agreement(pairs(ys, ys), ToleranceConfig(), "fp32", "tiny v1", "tiny v2")
    assert same.passed and same.answered == 6 and same.distinct == 2 and same.outputs["y"]["max_abs"] == 0.0
    off = cr.agreement(pairs(ys, [y + 0.01 for y in ys]), ToleranceConfig(), "fp32", "tiny v1", "tiny v2")
    assert not off.passed and "passes with parity.fp32.per_output.y.atol=0.01" in off.problems[0]
    loose = cr.agreement(pairs(ys, [y + 0.01 for y in ys]), ToleranceConfig(atol=0.02), "fp32", "tiny v1", "tiny v2")
    assert loose.passed
    assert not cr.agreement(ct.OutputPairs(["y"]), ToleranceConfig(), "fp32", "a", "b").passed


def errors(rate: float | None, failed: int = 0, requests: int = 0) -> ErrorCounts:
    """The candidate's error counts the verdict reads (the baseline's and production's play no part in it)."""
    return ErrorCounts(rate, failed, requests, 0, 0, ProductionCounts(0, 0, 0), {}, [])


def test_verdict_bounds_and_error_rate() -> None:
    cfg = CanaryConfig(max_p99_ratio=1.25, max_error_rate=0.01)
    ok = Agreement("parity.fp32", 40, 4, True, {}, [])
    lat = ct.paired_rounds(sent(ct.LIVE, 0, 400, 2.0) + sent(ct.CANDIDATE, 0.005, 400, 2.4), 5, 20)
    rate, failed, requests = cr.error_rate({"success": 995, "fail": 5}, 0, 1000)
    assert (rate, failed, requests) == (0.005, 5, 1000)
    checks = cr.verdict(ok, lat, errors(rate, failed, requests), cfg)
    assert [c.passed for c in checks] == [True, True, True], checks
    slow = ct.paired_rounds(sent(ct.LIVE, 0, 400, 2.0) + sent(ct.CANDIDATE, 0.005, 400, 3.0), 5, 20)
    checks = cr.verdict(ok, slow, errors(0.02, 20, 1000), cfg)
    assert [c.name for c in checks if not c.passed] == ["latency", "errors"] and "1.50x" in checks[1].detail
    assert cr.error_rate({"success": 0, "fail": 0}, 0, 0)[0] is None
    assert not cr.verdict(ok, slow, errors(None), cfg)[2].passed  # answered nothing: not a pass


def test_record_round_trip_and_summary(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path / "store")
    assert canaries.read(store.fs, "dev", "tiny") is None
    running = canary_record(
        "running",
        servers=["h:8000"],
        copies={"live": "tiny__canary_20260101T100000Z-v2-baseline", "candidate": "tiny__canary_20260101T100000Z-v2-candidate"},
        traffic=TrafficSettings("replay", 3, 0.1, 50, 4, 8, ["release 2's samples"]),
        bounds=Bounds(1.25, 0.0, 20),
        by="me@h pid 1",
    )
    cr.write_record(store.fs, running)
    assert not store.fs.exists("history/dev/tiny.canary/20260101T100000Z-v2.md")  # no table before the verdict
    failed = replace(
        running,
        id="20260101T110000Z-v2",
        status="failed",
        checks=[Check("outputs", False, "x")],
        verdict=Verdict(False, "outputs: differ"),
        finished_at="2026-01-01T10:01:00+00:00",
    )
    cr.write_record(store.fs, failed)
    last = canaries.read(store.fs, "dev", "tiny")
    assert last == failed and CanaryRecord.from_json(json.loads(json.dumps(running.to_json()))) == running
    assert last.summary_line() == "last canary 2026-01-01 10:00: v2 against live v1, FAILED: outputs: differ"
    assert list(json.loads(store.fs.read_text("history/dev/tiny.canary/20260101T110000Z-v2.json"))) == [
        *("schema", "id", "model", "env", "live", "candidate", "variant", "status", "started_at", "server", "servers", "copies", "traffic", "bounds", "by", "notes"),
        *("checks", "verdict", "finished_at"),
    ]  # the keys a record has always had, in their order
    md = store.fs.read_text("history/dev/tiny.canary/20260101T110000Z-v2.md")
    assert md.startswith("canary of tiny v2 against live v1 in 'dev'") and "verdict: FAILED: outputs: differ" in md


def test_signature() -> None:
    from tests.helpers.release_repo import tiny_config

    a = signature(tiny_config())
    assert asdict(a) == {"batched": True, "inputs": ["x: FP32[4]"], "outputs": ["y: FP32[4]"]}
    b = tiny_config()
    b.max_batch_size = 0
    assert signature(b).batched is False
