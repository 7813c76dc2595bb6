"""Issue 28: the bench fits a slow model. A model at ~200 ms per batch gets every headline with the default windows.

The stand-in is an ONNX graph that really costs ~200 ms per batch-1 request on this CPU (a chain of 512x512
MatMuls on one intra-op thread), served by the default embedded stand-in (native pipeline_ort: ONNX Runtime
inside tritonserver). The bench times the same file in process for its baseline and fits its perf_analyzer
windows from that baseline, so both sides cost what they say; a sleeping python-backend model would leave the
in-process side, and so the fitted windows, at a few microseconds.

What the test cuts to stay near 90 s (about 10 perf_analyzer runs of three ~1.6 s windows), all through config overrides: the concurrencies (bench.sweep.concurrency
and bench.rounds.throughput.concurrency [1, 2]), the rounds (2 of each, 1 alternation per c=1 round), the
baseline's runs and batch sizes, and the readiness parts (cold start, overload; soak, peers and tuning are off
by default). The measurement windows (bench.sweep.measurement_interval_ms, bench.rounds.measurement_interval_ms) and
the stability and trial settings stay as conf/ ships them: the bench itself must fit them to the model (here the
rounds' 500 ms becomes ~1.6 s, 4 requests at c=2; the sweep's 3 s already holds 4).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper

from pipeline.bench.measure.results import WINDOW_CAP_MS, WINDOW_LATENCIES
from pipeline.core.config import load_config
from pipeline.stages import bench as bench_stage
from tests.helpers.corpus import save_graph
from tests.bench.test_bench import procs_mentioning
from tests.helpers.stages import bench_args
from tests.tiny_triton import variant_config

pytestmark = [pytest.mark.triton, pytest.mark.timing]  # the model's cost is the point: run alone on the CPU

WIDTH = 512  # x [batch, WIDTH]; each step multiplies a [batch, WIDTH, WIDTH] tensor by a WIDTH x WIDTH matrix
STEPS = 70  # ~2.9 ms a step at batch 1 on one thread here (AMD EPYC, AVX-512): ~200 ms a request

# Everything but the windows: fewer concurrencies, rounds and readiness parts (see the module docstring).
SHORT = [
    "bench.sweep.concurrency=[1,2]",
    "bench.rounds.throughput.concurrency=[1,2]",
    "bench.rounds.c1.min=2",
    "bench.rounds.c1.max=2",
    "bench.rounds.throughput.min=2",
    "bench.rounds.throughput.max=2",
    "bench.rounds.alternations=1",
    "bench.baseline.warmup_runs=2",
    "bench.baseline.runs=6",
    "bench.baseline.batch_sizes=[1,2]",
    "bench.baseline.seconds=1.0",
    "bench.readiness.cold_start=false",
    "bench.overload.enabled=false",
]
WINDOWS = (("sweep", "measurement_interval_ms"), ("rounds", "measurement_interval_ms"))


def slow_onnx(path: Path, steps: int = STEPS, width: int = WIDTH) -> Path:
    """x [batch, width] -> y [batch, width]: the outer product x x^T, ``steps`` MatMuls by one orthogonal matrix, a mean.

    The matrix is orthogonal, so values keep their size through the chain (no inf, no denormals to slow it).
    """
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((width, width)))
    inits = [
        helper.make_tensor("Q", TensorProto.FLOAT, [width, width], q.astype(np.float32).ravel()),
        helper.make_tensor("last", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("mid", TensorProto.INT64, [1], [1]),
    ]
    nodes = [helper.make_node("Unsqueeze", ["x", "last"], ["col"]), helper.make_node("Unsqueeze", ["x", "mid"], ["row"]), helper.make_node("MatMul", ["col", "row"], ["h0"])]
    nodes += [helper.make_node("MatMul", [f"h{i}", "Q"], [f"h{i + 1}"]) for i in range(steps)]
    nodes.append(helper.make_node("ReduceMean", [f"h{steps}", "last"], ["y"], keepdims=0))
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        initializer=inits,
    )
    return save_graph(graph, path, opset=18)


def slow_repository(root: Path, name: str = "slow") -> Path:
    """``root/<name>/`` laid out as the repository stage writes it: the slow model, a latency and a throughput variant."""
    d = root / name
    slow_onnx(d / "1" / "model.onnx")
    (d / "configs").mkdir(parents=True)
    for v in ("latency", "throughput"):
        cfg = variant_config(name, v)  # one instance, one intra-op thread; dynamic batching [4, 8] on the throughput one
        cfg.input[0].dims[:], cfg.output[0].dims[:] = [WIDTH], [WIDTH]
        (d / "configs" / f"{v}.pbtxt").write_text(text_format.MessageToString(cfg))
    (d / "config.pbtxt").write_text((d / "configs" / "latency.pbtxt").read_text())
    return d


def test_a_model_at_200_ms_per_batch_gets_every_headline_with_the_default_windows(
    tmp_path: Path, make_params, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the bench's work dirs, so its servers are findable by path
    model_dir = slow_repository(tmp_path / "repo")
    params = make_params("model=onnx", "model.name=slow", f"model.path={model_dir / '1' / 'model.onnx'}", *SHORT)
    shipped = load_config(params).bench
    out = tmp_path / "out"
    code = bench_stage.main(bench_args(params, tmp_path / "repo", out, "--metrics", str(out / "metrics.json")))
    log = capsys.readouterr().out
    assert code == 0, log[-3000:]
    data, metrics = json.loads((out / "bench.json").read_text()), json.loads((out / "metrics.json").read_text())

    # The model really is slow, in process and in the server: far slower than a default window's share of a request
    # (its speed is the machine's: 96 to 250 ms per batch on the 2-core machines here, so the bound is loose).
    ort_p50 = data["baseline"]["latency"]["p50_ms"]
    assert 50 < ort_p50 < 600, ort_p50
    # Both windows were fitted to it: >= 4 request latencies at the top concurrency, from the in-process baseline.
    top, best = 2, data["baseline"]["throughput"]["best_infer_s"]
    fitted = min(WINDOW_CAP_MS, WINDOW_LATENCIES * max(ort_p50, 1000 * top / best))
    for section, key in WINDOWS:
        assert data["settings"][section][key] >= min(fitted - 1, WINDOW_CAP_MS), (section, key, data["settings"][section][key], fitted)
    assert data["settings"]["rounds"]["measurement_interval_ms"] > shipped.rounds.measurement_interval_ms  # 500 ms: under 4 requests
    assert "measurement windows fitted to the model" in log and f"bench.rounds.measurement_interval_ms {shipped.rounds.measurement_interval_ms} -> " in log

    # Every headline has a value with its interval, in bench.json, in the metrics and on the console line.
    ratios = data["ratios"]
    heads = ["latency_c1_p50_vs_ort_p50", "throughput_vs_latency_c2", "throughput_vs_ort_best_c2", "batching_tax_c1_ms"]
    for h in heads:
        assert ratios[h] is not None and ratios[f"{h}_ci90_low"] is not None and ratios[f"{h}_ci90_high"] is not None, (h, ratios)
        assert metrics["ratios"][h] is not None, h
    assert ratios["throughput_c1_queue_ms"] is not None
    line = next(ln for ln in log.splitlines() if ln.startswith("[bench] embedded mode"))
    assert "n/a" not in line and "not compared" not in line and "no interval" not in line, line
    report = (out / "bench" / "report.md").read_text()
    headline = report.split("## Headline", 1)[1].split("\n## ", 1)[0]
    assert headline.count("90% CI") >= 4 and "n/a" not in headline and "not compared" not in headline, headline
    # No measurement was INVALID: every round's runs, and so every point, are valid.
    rounds = [s for r in data["paired_c1"]["rounds"] for s in (r["latency"], r["throughput"])]
    rounds += [r[v] for t in data["paired_throughput"].values() for r in t["rounds"] for v in ("latency", "throughput")]
    assert len(rounds) == 8 and all(s["valid"] for s in rounds), [s["reason"] for s in rounds if not s["valid"]]
    assert all(p["valid"] for v in data["variants"].values() for p in v["points"].values())
    assert "INVALID" not in log, [ln for ln in log.splitlines() if "INVALID" in ln]
    # Nothing is missing for want of a window (a wide interval on a drifting machine is a finding, not a missing number).
    assert not [d for d in data["diagnosis"] if d["rule"] in ("invalid_measurement", "unstable_variant") or "no round gave a value" in d["message"]]
    # The served request costs what the in-process one does, give or take the machine: Triton timed ORT inside it.
    served = data["variants"]["latency"]["points"]["c1"]
    assert served["server_compute_infer_ms"] > 0.5 * ort_p50 and served["p50_ms"] > 0.5 * ort_p50
    assert not procs_mentioning(str(tmp_path))
