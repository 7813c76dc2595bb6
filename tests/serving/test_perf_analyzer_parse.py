"""perf_analyzer CSV parsing, command building and input JSON (no server needed)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.serving import perf_analyzer as pa
from pipeline.core.errors import ToolError

DATA = Path(__file__).resolve().parent.parent / "data"


def test_parse_recorded_csv_by_column_name() -> None:
    """A CSV recorded from a real perf_analyzer 2.51.0 run (-f --verbose-csv) against our embedded server."""
    (row,) = pa.parse_csv((DATA / "perf_analyzer_tiny_c1.csv").read_text())
    assert row["concurrency"] == 1
    assert row["throughput_infer_s"] == pytest.approx(1063.52)
    assert row["p50_ms"] == pytest.approx(0.893)  # CSV is in microseconds
    assert row["p99_ms"] == pytest.approx(1.107)
    assert row["server_queue_ms"] == pytest.approx(0.601)
    server = 0.601 + 0.012 + 0.123 + 0.022
    assert row["server_ms"] == pytest.approx(server)
    assert row["queue_share"] == pytest.approx(0.601 / server)


def test_parse_ignores_column_order_and_trailing_sections() -> None:
    text = (DATA / "perf_analyzer_tiny_c1.csv").read_text().strip().splitlines()
    header, values = text[0].split(","), text[1].split(",")
    order = list(reversed(range(len(header))))
    shuffled = ",".join(header[i] for i in order) + "\n" + ",".join(values[i] for i in order) + "\n\nServer Metrics\nfoo,bar\n"
    (row,) = pa.parse_csv(shuffled)
    assert row["p99_ms"] == pytest.approx(1.107)
    assert row["server_compute_infer_ms"] == pytest.approx(0.123)


def test_parse_without_verbose_columns_names_the_flag() -> None:
    with pytest.raises(ToolError, match="verbose-csv"):
        pa.parse_csv("Concurrency,Inferences/Second,p50 latency,p99 latency\n1,10,1000,2000\n")


def test_input_json_splits_rows_and_drops_batch_axis() -> None:
    feed = {"ids": np.arange(6, dtype=np.int64).reshape(2, 3), "mask": np.ones((2, 3), np.int64)}
    data = pa.input_data_json([feed], batched=True)
    assert len(data["data"]) == 2
    assert data["data"][1]["ids"] == {"content": [3, 4, 5], "shape": [3]}
    unbatched = pa.input_data_json([feed], batched=False)
    assert unbatched["data"][0]["ids"]["shape"] == [2, 3]


def test_build_command_has_every_knob(tmp_path: Path) -> None:
    p = pa.PerfAnalyzer(Path("/x/perf_analyzer"), "")
    opts = pa.PerfOptions(8, measurement_interval_ms=1234, stability_percentage=15, max_trials=7, shapes={"ids": [12]})
    cmd = pa.build_command(p, "m", "127.0.0.1:1", tmp_path / "in.json", tmp_path / "o.csv", opts)
    s = " ".join(cmd)
    for part in (
        "-m m",
        "-u 127.0.0.1:1",
        "--concurrency-range 8:8",
        "--measurement-interval 1234",
        "--stability-percentage 15",
        "--max-trials 7",
        "--verbose-csv",
        "--shape ids:12",
        "-f ",
    ):
        assert part in s


def test_load_is_one_concurrency_one_rate_or_one_schedule(tmp_path: Path) -> None:
    """The schedule wins over the rate, the rate over the concurrency; open loop runs asynchronously."""
    p = pa.PerfAnalyzer(Path("/x/perf_analyzer"), "")

    def argv(**load: object) -> str:
        return " ".join(pa.build_command(p, "m", "u", tmp_path / "in.json", tmp_path / "o.csv", pa.PerfOptions(**load)))

    assert "--concurrency-range 4:4" in argv(concurrency=4) and "--async" not in argv(concurrency=4)
    rate = argv(concurrency=4, request_rate=250.0)
    assert "--request-rate-range 250.0:250.0 --request-distribution constant --async" in rate and "--concurrency-range" not in rate
    gaps = argv(request_rate=250.0, request_intervals=tmp_path / "gaps.txt")
    assert f"--request-intervals {tmp_path / 'gaps.txt'} --async" in gaps and "--request-rate-range" not in gaps
    assert "--service-kind torchserve" in argv(service_kind="torchserve") and "--service-kind" not in argv()


def test_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pa, "_find_binary", lambda: None)
    with pytest.raises(ToolError, match="perf_analyzer not found") as e:
        pa.locate_perf_analyzer()
    assert "tritonclient[http]==2.51.0" in str(e.value)


def test_missing_library_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without our library dirs the real binary lacks libb64 and libcudart; the error names both."""
    binary = pa._find_binary()
    if binary is None:
        pytest.skip("perf_analyzer not installed")
    monkeypatch.setattr(pa, "lib_dirs", lambda: [])
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    with pytest.raises(ToolError) as e:
        pa.locate_perf_analyzer()
    msg = str(e.value)
    assert "libb64.so.0d" in msg and "libcudart.so.12" in msg and "nvidia-cuda-runtime-cu12" in msg


def test_real_binary_runs() -> None:
    found = pa.locate_perf_analyzer()
    assert found.binary.is_file()


def test_parse_recorded_minilm_throughput_run() -> None:
    """Recorded from the MiniLM throughput variant at concurrency 8 on the embedded server (2-core machine)."""
    (row,) = pa.parse_csv((DATA / "perf_analyzer_minilm_throughput_c8.csv").read_text())
    assert row["concurrency"] == 8
    assert row["throughput_infer_s"] == pytest.approx(162.868)
    assert row["p50_ms"] == pytest.approx(48.296) and row["p99_ms"] == pytest.approx(88.327)
    assert row["server_queue_ms"] == pytest.approx(35.099)
    assert row["server_compute_infer_ms"] == pytest.approx(12.985)
    assert row["queue_share"] == pytest.approx(35.099 / (35.099 + 0.048 + 12.985 + 0.341))


def test_a_run_that_never_ends_is_invalid_by_its_deadline_not_the_stage_budget(tmp_path: Path) -> None:
    """A request the server never answers holds perf_analyzer: the run's deadline comes from its own windows (three
    times its longest stability search, plus a minute), and the configured cap only bounds it."""
    opts = pa.PerfOptions(1, measurement_interval_ms=500, max_trials=10)
    assert opts.deadline_s(600.0) == pytest.approx(60 + 3 * 10 * 0.5)
    assert opts.deadline_s(20.0) == 20.0
    assert pa.PerfOptions(1, measurement_interval_ms=3000, max_trials=10).deadline_s(600.0) == pytest.approx(150.0)
    hung = pa.run(pa.PerfAnalyzer(Path("/bin/sleep"), ""), ["sleep", "30"], 1, tmp_path / "o.csv", timeout_s=0.3)
    assert not hung.valid and hung.reason().startswith("exit -1: timed out after 0 s")


def test_a_run_that_lingers_after_writing_its_results_is_stopped_and_kept(tmp_path: Path) -> None:
    """Past capacity perf_analyzer writes its results, then waits on every request still queued in the server (its
    threads spinning): once the table is printed and the CSV parses, the run is complete and the process is stopped.
    Without a complete CSV the run waits for its exit (or its deadline) as before."""
    csv_path = tmp_path / "o.csv"
    recorded = DATA / "perf_analyzer_minilm_throughput_c8.csv"
    fake = ["sh", "-c", f"echo 'Inferences/Second vs. Client Average Batch Latency'; cp {recorded} {csv_path}; exec sleep 30"]
    t0 = time.monotonic()
    lingering = pa.run(pa.PerfAnalyzer(Path("/bin/sh"), ""), fake, 8, csv_path, timeout_s=20)
    assert time.monotonic() - t0 < 10 and lingering.valid and lingering.row["throughput_infer_s"] == pytest.approx(162.868)
    assert lingering.log.startswith("[pipeline] stopped ") and "requests the server still had queued" in lingering.log
    assert "Inferences/Second vs. Client" in lingering.log
    no_csv = ["sh", "-c", "echo 'Inferences/Second vs. Client Average Batch Latency'; exec sleep 30"]
    unfinished = pa.run(pa.PerfAnalyzer(Path("/bin/sh"), ""), no_csv, 8, csv_path, timeout_s=1.5)
    assert not unfinished.valid and unfinished.reason().startswith("exit -1: timed out after 2 s")
