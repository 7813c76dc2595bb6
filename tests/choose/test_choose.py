"""precision auto: the decision rule over paired rounds, who may be a candidate, and the stage on tiny real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.choose.decide import eligible, pick
from pipeline.choose.timing import Round, Timing
from pipeline.records.choice import read_choice
from pipeline.records.parity import ParityReport
from pipeline.core.errors import ConfigError, RepositoryError
from pipeline.stages import choose as choose_stage
from tests.tiny_triton import tiny_onnx

PASSED = {"status": "passed", "passed": True}


def timing(p50: dict[str, list[float]], infer: dict[str, list[float]]) -> Timing:
    names = list(p50)
    t = Timing("fp32", names, dict.fromkeys(names, 8))
    t.rounds = [Round(i, names, {c: p50[c][i] for c in names}, {c: infer[c][i] for c in names}) for i in range(len(p50["fp32"]))]
    return t


def test_the_fastest_candidate_whose_whole_interval_is_faster_ships_per_variant() -> None:
    # Machine speed drifts round to round (both sides move together); int8 is ~2x faster at batch 1, fp16 slower.
    drift = [1.0, 1.3, 0.9, 1.1, 1.5, 1.0]
    t = timing(
        {"fp32": [10 * d for d in drift], "fp16": [13 * d for d in drift], "int8": [5 * d * (1 + 0.02 * (i % 2)) for i, d in enumerate(drift)]},
        {"fp32": [100 / d for d in drift], "fp16": [80 / d for d in drift], "int8": [101 / d + (3 if i % 2 else -3) for i, d in enumerate(drift)]},
    )
    assert t.latency_speedup("int8").low > 1.9
    precision, why = pick(t, "latency")
    assert precision == "int8" and why.startswith("auto: fastest by batch-1 p50, 1.98x") and "90% CI" in why
    # Throughput: int8's interval straddles 1.0 -> not shown faster; fp32, the most exact, keeps the variant.
    precision, why = pick(t, "throughput")
    assert precision == "fp32" and "no candidate shown faster than fp32 by best-batch inferences/s" in why


def test_candidates_must_pass_parity_and_int8_must_be_calibrated_on_real_samples(tiny_cfg, tmp_path: Path) -> None:
    files = {"fp32": tmp_path / "a", "fp16": tmp_path / "b", "int8": tmp_path / "c"}
    parity = {"schema": 1, "artifacts": {"fp32": PASSED, "fp16": PASSED, "int8": {"status": "failed", "passed": False, "outputs": {"y": {"passed": False}}}}}
    ok, out = eligible(tiny_cfg("+model.data={_target_: tests.helpers.tiny_models.mlp_samples}"), files, ParityReport.from_json(parity))
    assert list(ok) == ["fp32", "fp16"] and "did not pass parity" in out["int8"]
    ok, out = eligible(tiny_cfg(), files, ParityReport.from_json({**parity, "artifacts": {**parity["artifacts"], "int8": PASSED}}))
    assert "int8" not in ok and "synthetic" in out["int8"]


def run_stage(params: Path, tmp_path: Path, files: dict[str, Path], parity: dict) -> int:
    (tmp_path / "parity.json").write_text(json.dumps(parity))
    args = ["--params", str(params), "--parity", str(tmp_path / "parity.json"), "--report", str(tmp_path / "choose.json")]
    return choose_stage.main([*args, *(a for p, f in files.items() for a in (f"--{p}", str(f)))])


def test_auto_times_the_candidates_in_paired_rounds_and_records_the_choice(make_params, tmp_path: Path) -> None:
    from tests.conftest import TINY_MLP
    from tests.helpers.tiny_models import qdq_onnx

    fp32 = tiny_onnx(tmp_path / "model.fp32.onnx")
    files = {"fp32": fp32, "int8": qdq_onnx(fp32, tmp_path / "model.int8.onnx")}
    params = make_params(
        *TINY_MLP,
        "model.inputs=[{name: x, dtype: float32, shape: [batch, 16]}]",
        "target_specs.cpu.precision=auto",
        "+model.data={_target_: tests.helpers.tiny_models.embedder_samples}",
        "choose.min_rounds=2",
        "choose.max_rounds=3",
        "choose.burst_ms=20",
        "choose.batch_sizes=[1,4]",
        "choose.candidates=[fp32,int8]",
    )
    assert run_stage(params, tmp_path, files, {"schema": 1, "artifacts": {"fp32": PASSED, "int8": PASSED}}) == 0
    report = json.loads((tmp_path / "choose.json").read_text())
    t = report["timing"]
    assert 2 <= len(t["rounds"]) <= 3 and t["reference"] == "fp32" and set(t["candidates"]) == {"fp32", "int8"}
    assert {"value", "low", "high", "rounds"} <= set(t["candidates"]["int8"]["latency_speedup"])
    assert [r["order"] for r in t["rounds"][:2]] == [["fp32", "int8"], ["int8", "fp32"]]  # each takes each place
    choice = read_choice(tmp_path / "choose.json", RepositoryError)
    assert choice.configured == "auto" and {c.precision for c in choice.variants.values()} <= {"fp32", "int8"}
    assert all(c.reason.startswith("auto: ") for c in choice.variants.values())


def test_a_configured_precision_is_recorded_without_timing(make_params, tmp_path: Path) -> None:
    from tests.conftest import TINY_MLP

    files = {"fp32": tiny_onnx(tmp_path / "model.fp32.onnx")}
    assert run_stage(make_params(*TINY_MLP), tmp_path, files, {"schema": 1, "artifacts": {}}) == 0
    report = json.loads((tmp_path / "choose.json").read_text())
    assert report["timing"] is None and report["variants"]["latency"] == {"precision": "fp32", "reason": "configured: target_specs.cpu.precision=fp32"}


def test_auto_with_no_candidate_that_may_ship_fails_naming_each_reason(tiny_cfg, tmp_path: Path) -> None:
    from pipeline.choose.decide import choose

    (tmp_path / "parity.json").write_text(json.dumps({"schema": 1, "artifacts": {"fp32": {"status": "error", "reason": "could not run"}}}))
    with pytest.raises(ConfigError, match="no candidate may ship") as e:
        choose(tiny_cfg("target_specs.cpu.precision=auto"), {"fp32": tiny_onnx(tmp_path / "m.onnx")}, tmp_path / "parity.json")
    assert "fp32" in e.value.details and "fp16" in e.value.details
