"""Model Analyzer beside the tune, on the tiny model: it runs in its own venv against the same server and stand-in,
its best is measured against our winner in paired rounds, and it leaves no server behind; absent or failing, the tune
records why and completes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pipeline.tune import analyzer
from pipeline.tune.run import run_tune
from tests.bench.test_bench import procs_mentioning

FAST = [
    "+model.data={_target_: tests.helpers.tiny_models.mlp_samples}",
    "tune.enabled=true",
    "tune.model_analyzer.enabled=true",
    "tune.budget_s=60",
    "tune.concurrency=[4]",
    "tune.measurement_interval_ms=300",
    "tune.rounds=2",
    "tune.passes=1",
    "tune.final_rounds=2",
    # One step of ours (batching: the same max batch with no preferred size) and two configurations of Model Analyzer's (the
    # default and max batch 1): the point is the side by side and its paired rounds, not either search's reach.
    "tune.space.instance_count=[1]",
    "tune.space.max_batch_size=[8]",
    "tune.space.preferred_batch_sizes=[[2,8]]",
    "tune.space.max_queue_delay_us=[2000]",
    "tune.space.intra_op_threads=[1]",
    "tune.space.graph_optimization_level=[1]",
    "tune.model_analyzer.max_instance_count=1",
    "tune.model_analyzer.max_model_batch_size=1",
    "tune.model_analyzer.max_concurrency=4",
    "variants.throughput.max_batch_size=8",
    "variants.throughput.intra_op_threads=1",
    "variants.throughput.dynamic_batching.preferred_batch_sizes=[2,8]",
    "variants.throughput.warmup.batch_sizes=[1]",
]


@pytest.mark.triton  # tritonserver and perf_analyzer, ours and Model Analyzer's
@pytest.mark.timing  # both searches drive the CPU flat out for a minute: beside other tests, theirs would not measure
@pytest.mark.skipif(analyzer.locate(Path(__file__).resolve().parents[2]) is None, reason="Model Analyzer is not installed: bash scripts/setup.sh --model-analyzer")
def test_model_analyzer_side_by_side_on_the_tiny_model(tiny_cfg, tiny_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # .venv-ma is the project's
    cfg = tiny_cfg(*FAST)
    lines: list[str] = []
    record = run_tune(cfg, tiny_onnx, None, tmp_path / "work", lines.append)
    ma = record.model_analyzer
    assert ma is not None and ma.ran, (ma, lines[-20:], (tmp_path / "work" / "model-analyzer" / "model-analyzer.log").read_text()[-3000:] if ma else "")
    assert ma.knobs is not None and ma.knobs.instance_count == 1 and ma.knobs.max_batch_size in (1, 2, 4, 8)  # its search's sizes, or the configured variant's and ma.measured >= 2
    assert ma.config_name.startswith("tune_ma_config") and ma.wall_s <= cfg.tune.budget_s + 15
    assert ma.knobs.intra_op_threads == record.start.intra_op_threads  # MA leaves ORT threads as shipped
    if ma.knobs != record.winner:
        c = record.vs_model_analyzer
        assert c is not None and c.a == "winner" and c.b == "model-analyzer" and c.ratio.rounds == 2 and c.ratio.value is not None
        assert c.a_p99_ms is not None and c.b_p99_ms is not None
    else:
        assert record.vs_model_analyzer is None and any("Model Analyzer's best is our winner" in n for n in record.notes)
    assert record.wall_s <= cfg.tune.budget_s + 15 and record.source in ("search", "config-kept")
    assert not procs_mentioning(str(tmp_path), ("tritonserver", "perf_analyzer", "model-analyzer")), "a server or client was left running"
    reports = tmp_path / "work" / "model-analyzer" / "export" / "reports"
    assert (reports / "summaries").is_dir() and not (reports / "detailed").exists()  # the summary carries the results table


def test_model_analyzer_absent_or_failing_is_recorded_with_its_own_line(tiny_cfg, tiny_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.repository.writer import CandidateWriter
    from pipeline.tune.arena import ShippedArena

    cfg = tiny_cfg(*FAST)
    arena = ShippedArena(cfg, CandidateWriter(cfg, tiny_onnx, None), tmp_path / "work", lambda _: None)  # no server yet
    monkeypatch.setenv("PIPELINE_MODEL_ANALYZER", str(tmp_path / "none"))
    absent = analyzer.run(cfg, arena, tmp_path / "ma", lambda _: None)
    assert not absent.ran and "not installed" in absent.error and analyzer.INSTALL in absent.error
    # A model-analyzer that fails: the record keeps its own error line.
    fake = tmp_path / "model-analyzer"
    fake.write_text("#!/bin/sh\necho '[Model Analyzer] Starting'\necho '[Model Analyzer] ERROR: Config for profile_models is invalid' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PIPELINE_MODEL_ANALYZER", str(fake))
    failed = analyzer.run(cfg, arena, tmp_path / "ma", lambda _: None)
    assert not failed.ran and failed.error == "Model Analyzer failed (exit 1): [Model Analyzer] ERROR: Config for profile_models is invalid"
    written = (tmp_path / "ma" / "ma.yaml").read_text()
    assert "perf_latency_p99" in written and "checkpoint_directory" in written and ":$LD_LIBRARY_PATH" in written
