"""bench.json's record (pipeline.records.bench): the keys other stages read, written and read back through one pair."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.core.errors import BenchError
from pipeline.records.bench import SCHEMA, BenchRecord, MeasuredModel

MODEL = MeasuredModel(
    "tiny",
    "repo/tiny/1/model.onnx",
    "1",
    {"latency": "repo/tiny/configs/latency.pbtxt"},
    "ab" * 32,
    {"latency": "cd" * 32},
    {"latency": "ab" * 32},
)


def paths(d: Any, prefix: str = "") -> set[str]:
    return {f"{prefix}{k}" for k in d} | {p for k, v in d.items() if isinstance(v, dict) and k != "summary" for p in paths(v, f"{prefix}{k}.")}


def test_the_record_round_trips_with_the_keys_releases_read() -> None:
    rec = BenchRecord(MODEL, {"ratios": {"latency_c1_p50_vs_ort_p50": 1.2}})
    d = json.loads(json.dumps(rec.to_json()))
    assert paths(d) == {
        "schema",
        "summary",
        "model",
        *(f"model.{k}" for k in ("name", "onnx", "version", "sha256", "configs", "configs_sha256", "files_sha256")),
        "model.configs.latency",
        "model.configs_sha256.latency",
        "model.files_sha256.latency",
    }
    assert d["schema"] == SCHEMA and BenchRecord.from_json(d | {"variants": {"latency": {}}}) == rec


def test_optional_parts_stay_out_of_the_json() -> None:
    """A run without ratios has no summary; a model measured before the per-file shas has none of them."""
    bare = MeasuredModel("tiny", "m.onnx", "1", {"latency": "l.pbtxt"})
    d = BenchRecord(bare).to_json()
    assert d == {"schema": SCHEMA, "model": {"name": "tiny", "onnx": "m.onnx", "version": "1", "configs": {"latency": "l.pbtxt"}}}
    assert BenchRecord.from_json(d) == BenchRecord(bare)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: [], "no model section"),
        (lambda d: {k: v for k, v in d.items() if k != "model"}, "no model section"),
        (lambda d: d | {"schema": SCHEMA + 1}, f"has schema {SCHEMA + 1}; this pipeline reads up to {SCHEMA}"),
        (lambda d: {k: v for k, v in d.items() if k != "schema"}, "has no schema"),
        (lambda d: d | {"schema": True}, "schema is a bool, not a int"),
        (lambda d: d | {"summary": [1]}, "summary is a list, not a dict"),
        (lambda d: d | {"model": {k: v for k, v in d["model"].items() if k != "onnx"}}, "has no model.onnx"),
        (lambda d: d | {"model": d["model"] | {"sha256": 7}}, "model.sha256 is a int, not a str"),
        (lambda d: d | {"model": d["model"] | {"configs_sha256": {"latency": 7}}}, "model.configs_sha256 must map variant names to strings"),
    ],
)
def test_a_report_that_does_not_parse_names_what_is_wrong(change: Any, message: str) -> None:
    d = BenchRecord(MODEL, {"ratios": {}}).to_json()
    with pytest.raises(BenchError, match="bench.json") as e:
        BenchRecord.from_json(change(d))
    assert message in e.value.what and "dvc repro bench" in (e.value.fix or "")
