"""The repository ships the tune's winner through the code that rendered what was measured, and refuses a stale one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline.core.atomic import file_digest, write_json
from pipeline.core.errors import RepositoryError
from pipeline.records.tune import TuneKnobs, TuneRecord, read_tune
from pipeline.repository import config as triton_config
from pipeline.repository.served import tuned
from pipeline.repository.writer import CandidateWriter, write_repository

DATA = "+model.data={_target_: tests.helpers.tiny_models.mlp_samples}"


def _record(cfg, onnx: Path, winner: TuneKnobs) -> TuneRecord:  # noqa: ANN001 - a PipelineConfig
    start = TuneKnobs.of_variant(cfg.variants.throughput)
    return TuneRecord(True, "search", "perf_throughput", 100.0, [16], start, winner, "moved", onnx=str(onnx), onnx_sha256=file_digest(onnx)[0], precision="fp32")


def test_the_repository_ships_the_winner_exactly_as_it_was_measured(tiny_cfg, tiny_onnx: Path, tmp_path: Path) -> None:
    cfg = tiny_cfg(DATA)
    winner = TuneKnobs(2, 8, (8,), 500, 1, 1, -1)
    write_json(tmp_path / "tune.json", _record(cfg, tiny_onnx, winner).to_json())
    shipped_cfg, note = tuned(cfg, tmp_path / "tune.json", tiny_onnx)
    assert winner.label() in note and "search: moved" in note
    repo = tmp_path / "repo"
    repo.mkdir()
    write_repository(shipped_cfg, tiny_onnx, repo)
    shipped = triton_config.parse(repo / "tiny" / "configs" / "throughput.pbtxt")
    measured_dir = tmp_path / "measured"
    CandidateWriter(cfg, tiny_onnx, None).write(measured_dir, {"cand": winner.onto_variant(cfg.variants.throughput)})
    measured = triton_config.parse(measured_dir / "cand" / "config.pbtxt")
    measured.name = shipped.name
    assert measured == shipped  # field for field: the config measured is the config shipped
    assert shipped.instance_group[0].count == 2 and shipped.max_batch_size == 8 and list(shipped.dynamic_batching.preferred_batch_size) == [8]
    assert shipped.dynamic_batching.max_queue_delay_microseconds == 500 and shipped.optimization.graph.level == -1
    assert shipped.parameters["intra_op_thread_count"].string_value == "1" and max(w.batch_size for w in shipped.model_warmup) <= 8
    latency = triton_config.parse(repo / "tiny" / "configs" / "latency.pbtxt")
    assert latency.instance_group[0].count == cfg.variants.latency.instance_count  # only the throughput variant moves


def test_a_tune_record_of_another_file_or_another_start_is_refused(tiny_cfg, tiny_onnx: Path, tmp_path: Path) -> None:
    cfg = tiny_cfg(DATA)
    record = _record(cfg, tiny_onnx, TuneKnobs.of_variant(cfg.variants.throughput))
    write_json(tmp_path / "other.json", dataclasses.replace(record, onnx_sha256="0" * 64).to_json())
    with pytest.raises(RepositoryError, match="searched on another file") as e:
        tuned(cfg, tmp_path / "other.json", tiny_onnx)
    assert e.value.fix == "rerun the tune stage on this one: dvc repro tune"
    moved = dataclasses.replace(cfg, variants=dataclasses.replace(cfg.variants, throughput=dataclasses.replace(cfg.variants.throughput, instance_count=3)))
    write_json(tmp_path / "tune.json", record.to_json())
    with pytest.raises(RepositoryError, match="started from another throughput variant"):
        tuned(moved, tmp_path / "tune.json", tiny_onnx)
    (tmp_path / "broken.json").write_text('{"schema": 1, "source": "guess"}')
    with pytest.raises(RepositoryError, match="is not a tune record"):
        read_tune(tmp_path / "broken.json", RepositoryError)


def test_the_tune_record_round_trips() -> None:
    from pipeline.records.tune import AnalyzerRun, Comparison, Interval, Trial

    k = TuneKnobs(1, 16, (4, 8), 2000, 2, 1, 1)
    w = dataclasses.replace(k, max_batch_size=32, preferred_batch_sizes=(16, 32))
    c = Comparison("winner", "model-analyzer", w, k, Interval(1.1, 1.05, 1.2, 6), 300.0, 270.0, 50.0, 60.0)
    r = TuneRecord(
        True, "search", "perf_throughput", 100.0, [16], k, w, "moved", trials=[Trial(0, "max_batch_size", w, Interval(1.2, 1.1, 1.3, 3), 300.0, 50.0, 3, True, "moved the search")]
    )
    r.model_analyzer, r.vs_model_analyzer, r.vs_start = AnalyzerRun(True, "", k, "tune_ma_config_3", 120.0, 8, 280.0, 55.0), c, c
    back = TuneRecord.from_json(r.to_json(), "x", RepositoryError)
    assert back == r and back.to_json() == r.to_json()


def test_the_metrics_stay_a_handful_of_columns() -> None:
    """`dvc exp show` shows every metrics key as a column: one while the tune is off, a few with its intervals when on."""
    from pipeline.records.tune import Comparison, Interval
    from pipeline.tune import report

    k = TuneKnobs(1, 16, (4, 8), 2000, 2, 1, 1)
    off = TuneRecord(False, "config", "perf_throughput", 100.0, [16], k, k, "tune.enabled=false")
    assert report.headline(off) == {"source": "config"} and "Ships: `i1 b16 p[4,8] d2000 t2/1 g1`" in report.markdown(off)
    on = dataclasses.replace(off, enabled=True, source="search", wall_s=300.0)
    on.vs_start = Comparison("winner", "start", k, k, Interval(1.1, 1.05, 1.15, 6), 400.0, 360.0, 60.0, 65.0)
    assert report.headline(on) == {"source": "search", "partial": False, "wall_s": 300.0, "vs_start": 1.1, "vs_start_ci90_low": 1.05, "vs_start_ci90_high": 1.15}
    assert "winner over start: 1.100x (90% CI 1.050-1.150, 6 rounds)" in report.markdown(on)
