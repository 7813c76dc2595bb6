"""Tolerances, statistics, the smallest passing atol, NaN handling and the artifact lookup (no models)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from polygraphy.comparator import RunResults
from polygraphy.comparator.struct import IterationResult

from pipeline.parity import polygraphy as pg
from pipeline.core.config import ErrorStat, OutputToleranceConfig, ToleranceConfig
from pipeline.core.errors import ConfigError, ParityError
from pipeline.parity.report import failures, gate, polygraphy_options, resolve, summarize_output
from pipeline.records.parity import ArtifactResult, ParityReport
from pipeline.core.samples import load_feed_file, load_samples
from pipeline.core.config import ModelConfig


def runs(name: str, samples: list[dict[str, np.ndarray]]) -> RunResults:
    r = RunResults()
    r.append((name, [IterationResult(OrderedDict(s), runtime=0.0, runner_name=name) for s in samples]))
    return r


def check(ref: list[np.ndarray], art: list[np.ndarray], tol: ToleranceConfig) -> dict:
    """Compare with Polygraphy and summarize one output 'y' the way the stage does (its entry as the report holds it)."""
    opts = polygraphy_options(tol, ["y"])
    with pg.quiet():
        per = pg.compare(
            runs("reference", [{"y": r} for r in ref]), runs("art", [{"y": a} for a in art]), pg.compare_func(opts["atol"], opts["rtol"], opts["stat"], opts["quantile"])
        )
    return summarize_output("y", resolve(tol, "y"), [m.get("y") for m in per], art, ref).to_json()


REF = [np.linspace(1.0, 2.0, 1000, dtype=np.float32)]
ONE_OUTLIER = [REF[0].copy()]
ONE_OUTLIER[0][10] += 0.5  # one element off by 0.5, every other exact


@pytest.mark.parametrize(
    ("stat", "passed"),
    [("elemwise", False), ("max", False), ("mean", True), ("median", True), ("quantile", True)],
)
def test_stat_decides_on_a_single_outlier(stat: str, passed: bool) -> None:
    rep = check(REF, ONE_OUTLIER, ToleranceConfig(atol=1e-3, rtol=1e-4, check_error_stat=ErrorStat(stat), error_quantile=0.99))
    assert rep["passed"] is passed and rep["stat"] == stat
    assert rep["max_abs"] == pytest.approx(0.5) and rep["mean_abs"] == pytest.approx(0.5 / 1000)


@pytest.mark.parametrize("stat", ["elemwise", "max", "mean", "quantile"])
def test_min_passing_atol_is_the_smallest_that_passes(stat: str) -> None:
    rng = np.random.default_rng(0)
    art = [REF[0] + rng.normal(0, 1e-2, REF[0].shape).astype(np.float32)]
    tol = ToleranceConfig(atol=1e-6, rtol=1e-6, check_error_stat=ErrorStat(stat), error_quantile=0.9)
    rep = check(REF, art, tol)
    need = rep["min_passing_atol"]
    assert rep["passed"] is False and need > 0
    assert check(REF, art, ToleranceConfig(atol=need * 1.0001, rtol=1e-6, check_error_stat=ErrorStat(stat), error_quantile=0.9))["passed"] is True
    assert check(REF, art, ToleranceConfig(atol=need * 0.98, rtol=1e-6, check_error_stat=ErrorStat(stat), error_quantile=0.9))["passed"] is False


def test_rtol_alone_can_pass_and_then_no_atol_is_needed() -> None:
    art = [REF[0] * np.float32(1.001)]
    rep = check(REF, art, ToleranceConfig(atol=1e-9, rtol=1e-2))
    assert rep["passed"] is True and rep["min_passing_atol"] == 0.0


def test_nan_and_inf_always_fail_whatever_the_tolerance() -> None:
    for bad in (np.nan, np.inf):
        art = [REF[0].copy()]
        art[0][3] = bad
        rep = check(REF, art, ToleranceConfig(atol=1e9, rtol=1e9, check_error_stat=ErrorStat.median))
        assert rep["passed"] is False and rep["nonfinite"] == 1 and rep["min_passing_atol"] is None
        assert "NaN/Inf" in rep["problems"][0]


def test_per_output_overrides_inherit_the_rest() -> None:
    tol = ToleranceConfig(atol=1e-4, rtol=1e-3, per_output={"logits": OutputToleranceConfig(atol=0.5, check_error_stat=ErrorStat.mean)})
    assert resolve(tol, "logits") == {"atol": 0.5, "rtol": 1e-3, "stat": "mean", "quantile": 0.99}
    assert resolve(tol, "other")["stat"] == "max"
    opts = polygraphy_options(tol, ["logits", "other"])
    assert opts["atol"] == {"": 1e-4, "logits": 0.5, "other": 1e-4} and opts["stat"]["logits"] == "mean"


def test_shape_mismatch_fails_with_a_reason() -> None:
    rep = check(REF, [REF[0][:999]], ToleranceConfig(atol=1.0))
    assert rep["passed"] is False and "shape" in rep["problems"][0]


def report(**arts: dict) -> ParityReport:
    return ParityReport.from_json({"schema": 1, "passed": False, "reference": {"source": "torch", "samples": 1}, "artifacts": arts})


def test_artifact_passed_and_gate_message() -> None:
    y_fail = {
        "passed": False,
        "stat": "max",
        "stat_abs": 0.3,
        "stat_rel": 2.0,
        "atol": 0.02,
        "rtol": 0.02,
        "failed_samples": 2,
        "samples": 8,
        "max_abs": 0.3,
        "mean_abs": 0.01,
        "min_passing_atol": 0.3,
    }
    r = report(
        fp32={"status": "passed", "passed": True, "outputs": {}},
        fp16={"status": "failed", "passed": False, "outputs": {"embedding": y_fail}},
        **{"trt@a100": {"status": "skipped", "reason": "no GPU"}},
    )
    assert r.verdict("fp32") == (True, "passed")
    assert r.verdict("fp16") == (False, "parity failed for outputs ['embedding']")
    assert r.verdict("trt:a100") == (False, "parity skipped: no GPU")
    assert r.verdict("trt@h100")[0] is False and "not in the parity report" in r.verdict("trt@h100")[1]
    assert failures(r.artifacts) == [
        "fp16/embedding: max error abs=0.3 > atol=0.02 and rel=2 > rtol=0.02 in 2/8 samples (max_abs=0.3, mean_abs=0.01); passes with parity.fp16.per_output.embedding.atol=0.3"
    ]
    with pytest.raises(ParityError) as e:
        gate(r, "parity.json")
    assert "parity failed for 1 output(s)" in e.value.what and "parity.fp16.per_output.embedding.atol=0.3" in e.value.render()


def test_bad_stat_or_per_output_key_fails_at_load(tiny_cfg) -> None:
    with pytest.raises(ConfigError) as e:
        tiny_cfg("parity.fp16.check_error_stat=maximum")
    assert "parity.fp16.check_error_stat" in e.value.render()
    with pytest.raises(ConfigError) as e:
        tiny_cfg("+parity.fp16.per_output.y.atoll=0.1")
    assert "atoll" in e.value.render()
    assert tiny_cfg("+parity.fp16.per_output.y.atol=0.1").parity.fp16.per_output["y"].atol == 0.1


def test_sample_files_json_and_npz(tmp_path: Path) -> None:
    from polygraphy.json import save_json

    feeds = [{"x": np.ones((2, 8), np.float32)}, {"x": np.zeros((3, 8), np.float32)}]
    save_json(feeds, str(tmp_path / "in.json"))
    np.savez(tmp_path / "in.npz", x=np.full((4, 8), 2.0, np.float32))
    got = load_samples(ModelConfig(data={"path": str(tmp_path / "in.json")}))
    assert [f["x"].shape for f in got] == [(2, 8), (3, 8)]
    assert load_feed_file(tmp_path / "in.npz")[0]["x"].shape == (4, 8)
    (tmp_path / "in.txt").write_text("x")
    with pytest.raises(ConfigError, match="is not .json, .npz or .npy"):
        load_feed_file(tmp_path / "in.txt")
    with pytest.raises(ConfigError, match="not found"):
        load_feed_file(tmp_path / "missing.json")


@pytest.mark.parametrize("need", [2.9802322387695312e-07, 1.0000001e-3, 0.0123456, 4.2e-5])
def test_printed_atol_suggestion_passes_when_applied(need: float) -> None:
    """The failure message's `passes with ...atol=X` is rounded up, so pasting X passes (2.98e-07 used to fail)."""
    import re

    art = [REF[0].copy()]
    art[0][3] += np.float32(need)
    real_need = float(np.abs(art[0].astype(np.float64) - REF[0].astype(np.float64)).max())
    tol = ToleranceConfig(atol=1e-12, rtol=1e-12, check_error_stat=ErrorStat.max)
    rep = check(REF, art, tol)
    lines = failures({"fp32": ArtifactResult.from_json({"status": "failed", "outputs": {"y": rep}})})
    printed = float(re.search(r"parity\.fp32\.per_output\.y\.atol=([0-9.e+-]+)", lines[0]).group(1))
    assert printed >= real_need
    assert check(REF, art, ToleranceConfig(atol=printed, rtol=1e-12, check_error_stat=ErrorStat.max))["passed"] is True
