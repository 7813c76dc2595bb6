"""scripts/check_outputs.py, the restructuring's output check: it sees every change that matters and no run-to-run noise."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.project import script


def _script() -> ModuleType:
    return script("check_outputs")


def _artifacts(root: Path, *, p50: float = 1.5, model: bytes = b"onnx-bytes") -> Path:
    (root / "reports/bench").mkdir(parents=True)
    (root / "model_repository/m/1").mkdir(parents=True)
    (root / "logs").mkdir()
    (root / "reports/bench.json").write_text(json.dumps({"summary": {"p50_ms": p50}, "rounds": [{"order": 1}]}))
    (root / "reports/bench/report.md").write_text(f"# Bench\n\np50 {p50} ms\n\n## Rounds\n")
    (root / "reports/curve.csv").write_text(f"concurrency,p50_ms\n1,{p50}\n")
    (root / "model_repository/m/1/model.onnx").write_bytes(model)
    (root / "reports/bench/bench.png").write_bytes(str(p50).encode())  # a plot: the machine's numbers
    (root / "logs/perf_analyzer_round7.log").write_text(str(p50))  # one per adaptive round: the machine's too
    return root


def test_numbers_differ_and_nothing_is_reported_while_bytes_keys_and_files_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script()
    before = script.snapshot(_artifacts(tmp_path / "a" / "artifacts"))
    assert set(before["files"]) == {"reports/bench.json", "reports/bench/report.md", "reports/curve.csv", "model_repository/m/1/model.onnx"}
    # Another run of the same code: other timings, same shape and the same shipped bytes.
    assert script.differences(before, script.snapshot(_artifacts(tmp_path / "b" / "artifacts", p50=2.25))) == []

    changed = _artifacts(tmp_path / "c" / "artifacts", model=b"other-bytes")
    (changed / "reports/bench.json").write_text(json.dumps({"summary": {"p50_ms": 1.0, "p99_ms": 2.0}, "rounds": []}))
    (changed / "reports/bench/report.md").write_text("# Bench\n")
    (changed / "reports/curve.csv").unlink()
    (changed / "reports/new.json").write_text("{}")
    lines = script.differences(before, script.snapshot(changed))
    assert lines == [
        "removed: reports/curve.csv",
        "added: reports/new.json",
        "bytes changed: model_repository/m/1/model.onnx",
        "keys changed: reports/bench.json: lost ['rounds[]', 'rounds[].order'], gained ['summary.p99_ms']",
        "keys changed: reports/bench/report.md: lost ['## Rounds'], gained []",
    ]

    # The command: a stored fingerprint against a folder, exit 1 with a count when anything differs.
    stored = tmp_path / "before.json"
    stored.write_text(json.dumps(before))
    monkeypatch.setattr("sys.argv", ["check_outputs.py", "compare", str(stored), str(changed)])
    assert script.main() == 1 and capsys.readouterr().out.endswith("4 files compared: 5 differences\n")
    monkeypatch.setattr("sys.argv", ["check_outputs.py", "compare", str(stored), str(tmp_path / "b" / "artifacts")])
    assert script.main() == 0 and capsys.readouterr().out == "4 files compared: same outputs\n"
