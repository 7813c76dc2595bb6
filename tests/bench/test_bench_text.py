"""The bench measures the text endpoint users call, beside the tensor one: paired c=1 rounds against tokenize + ONNX
Runtime in process (a headline with its interval), the server time outside the tensor model, throughput per variant."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.bench.results import BenchResult
from pipeline.bench.run import run_bench
from pipeline.core.config import load_config
from pipeline.release.evidence.reports import bench_section
from pipeline.repository.writer import write_repository
from tests.bench.test_bench import procs_mentioning
from tests.helpers.tiny_text import text_model_overrides

pytestmark = pytest.mark.triton  # judges what the report holds, not how fast: it runs beside other tests

# The fewest rounds and shortest windows that give every number; three windows within 100% of each other count, found
# in up to 20 (busy neighbours).
FAST = [
    "bench.rounds.c1.min=2",
    "bench.rounds.c1.max=2",
    "bench.rounds.throughput.min=2",
    "bench.rounds.throughput.max=2",
    "bench.rounds.throughput.concurrency=[4]",
    "bench.rounds.measurement_interval_ms=200",
    "bench.rounds.stability_percentage=100",
    "bench.rounds.alternations=2",
    "bench.max_trials=20",
    "bench.baseline.warmup_runs=5",
    "bench.baseline.runs=50",
    "bench.baseline.seconds=0.2",
    "bench.baseline.batch_sizes=[1,4]",
    "bench.readiness.cold_start=false",
    "bench.overload.enabled=false",
    "bench.text.rounds=2",
    "bench.text.concurrency=[4]",
    "bench.text.cache.rounds=2",
    "bench.text.cache.requests=200",
    "bench.text.cache.concurrency=4",
]
SENTENCES = "# sample sentences\nThe cat sat on the mat.\nA dog ran fast\nred blue green\nthe model server batch queue token text\nslow\n"


def test_the_bench_measures_the_text_endpoint_beside_the_tensor_one(make_params: Callable[..., Path], tmp_path: Path) -> None:
    cfg = load_config(make_params(*text_model_overrides(tmp_path / "model"), *FAST))
    repo = tmp_path / "repo"
    repo.mkdir()
    write_repository(cfg, Path(str(cfg.model.path)), repo)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text(SENTENCES, encoding="utf-8")
    out = tmp_path / "out"
    res = run_bench(cfg, repo, out / "bench.json", out / "bench", out / "curves", sentences=sentences)

    t = res.text
    assert t is not None and t.model == "tinytext_text" and len(t.rounds) == 2
    assert [r.order for r in t.rounds] == ["served first", "in-process first"]
    assert all(r.text_p50_ms and r.tensor_p50_ms and r.in_process_p50_ms > 0 for r in t.rounds), t.rounds
    head = t.vs_in_process
    assert head.has_interval and head.low <= head.value <= head.high and head.value > 1  # type: ignore[operator]  # Triton adds HTTP and a BLS hop
    assert t.python_share is not None and 0 < t.python_share < 1
    assert t.instances == {"latency": 1, "throughput": 1}
    for v in ("latency", "throughput"):
        assert t.throughput[v][4]["throughput_infer_s"] > 0, t.throughput
    # The response cache: the shipped text model (cache off) against its cached twin, paired; a cached answer is the same bytes.
    c = t.cache
    assert c is not None and c.model == "tinytext_text_cached" and c.requests == 200 and 1 < c.distinct <= 5
    assert [r.order for r in c.rounds] == ["off first", "on first"]
    assert all(r.off_p50_ms and r.on_p50_ms and r.off_infer_s and r.on_infer_s for r in c.rounds), c.rounds
    assert all(r.hit_ratio is not None and r.hit_ratio > 0.9 for r in c.rounds), c.rounds  # 5 texts, hundreds of requests
    assert c.identical is True and c.checked == c.distinct and c.check_hits == 2 * c.checked  # each new text's second ask, each workload text
    assert c.batched_max_abs is not None and c.batched_max_abs < 1e-5  # batching's rounding only: parity's fp32 tolerance
    assert c.p50_speedup.has_interval and c.throughput_ratio.has_interval
    # The text model's instance count: the shipped 1 against a served copy with 2 (two cores here), paired.
    ic = t.instance_choice
    assert ic is not None and (ic.shipped, ic.other, ic.concurrency) == (1, 2, 4) and len(ic.rounds) == 2
    assert all(s and o for s, o in ic.rounds) and ic.ratio.has_interval, ic
    data = json.loads((out / "bench.json").read_text())
    assert data["summary"]["text_endpoint"]["text_cache_hit_ratio"] == c.hit_ratio
    assert data["summary"]["text_endpoint"]["text_instances_other"] == 2
    assert BenchResult.from_json(data).text == t  # round trip through bench.json
    assert data["summary"]["text_endpoint"]["text_c1_p50_vs_in_process_ci90_low"] is not None
    report = (out / "bench" / "report.md").read_text()
    assert "## Text endpoint (tinytext_text)" in report and "90% CI" in report.split("## Text endpoint", 1)[1]
    assert "### Response cache (tinytext_text_cached, local, 16 MB)" in report and "byte-identical" in report
    assert f"**Chosen: {ic.verdict}.**" in report and "2 instances against the shipped 1" in report
    # A release of the endpoint carries this summary only for the files measured: the tokenizer changed, none.
    section = bench_section(out / "bench.json", "tinytext_text", repo / "tinytext_text", repo / "tinytext_text" / "1")
    assert section.measured and section.summary == data["summary"]["text_endpoint"] and set(section.configs_sha256 or {}) == {"latency", "throughput"}
    assert section.model_sha256 == data["model"]["sha256"]  # the tensor model's file the endpoint called
    other = tmp_path / "other"
    shutil.copytree(repo / "tinytext_text", other / "tinytext_text")
    (other / "tinytext_text" / "1" / "tokenizer.json").write_text("{}", encoding="utf-8")
    section = bench_section(out / "bench.json", "tinytext_text", other / "tinytext_text", other / "tinytext_text" / "1")
    assert not section.measured and "differ: tokenizer.json" in str(section.reason), section.reason
    assert not list(repo.rglob("__pycache__"))  # served from a copy: the stub's bytecode never lands in a DVC output
    assert not procs_mentioning(str(tmp_path))
