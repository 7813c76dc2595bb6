"""`release build` on a real copy of this project: a release is consistent with its inputs or refused.

The project is copied into tmp with a tiny two-input, two-output ONNX model (``model=onnx``, its inputs read from
the graph), ``dvc repro repository``
runs once, and each test starts from a copy of that state (git history and DVC cache included):

(a) a committed but unrun params change (finding 3) is refused, naming stage ``repository``, and one of
    the precision choice's params, naming ``choose``;
(b) a model file rewritten in place (a "retrain", finding 1) is refused: its source record no
    longer matches;
(c) after ``dvc repro repository`` the build succeeds, and the manifest's parity and bench
    sections are summaries carrying the shas of the shipped files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from pipeline.core.atomic import file_digest
from pipeline.records.bench import BenchRecord, MeasuredModel
from tests.helpers import project as harness
from tests.helpers.project import TWO, Built, Recipe, commit
from tests.helpers.release_repo import retrain_onnx

BASE = list(TWO.overrides)
# The bench's default phases, shorter: two rounds of each headline in 200 ms windows (the tiny model answers thousands
# of requests in each), three within 100% of each other counting, found in up to 20 (beside busy test workers), no
# cold-start or overload servers.
SHORT_BENCH = [
    "bench.rounds.measurement_interval_ms=200",
    "bench.rounds.stability_percentage=100",
    "bench.max_trials=20",
    "bench.rounds.c1.min=2",
    "bench.rounds.c1.max=2",
    "bench.rounds.throughput.min=2",
    "bench.rounds.throughput.max=2",
    "bench.rounds.throughput.concurrency=[1,8]",
    "bench.rounds.alternations=2",
    "bench.rounds.budget_s=10",
    "bench.readiness.cold_start=false",
    "bench.overload.enabled=false",
    "bench.baseline.warmup_runs=5",
    "bench.baseline.runs=50",
    "bench.baseline.seconds=0.2",
    "bench.baseline.batch_sizes=[1,8]",
]
# As a user runs it, on a terminal wide enough that no message is wrapped.
sh = partial(harness.sh, env={"COLUMNS": "200"})


def release_build(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return sh(project, sys.executable, "-m", "pipeline.cli", "release", "build", "--store", str(project.parent / "store"), *args, check=False)


@pytest.fixture
def project(built: Callable[[Recipe], Built]) -> Path:
    """A copy of the project after its first `dvc repro repository`, committed."""
    return built(TWO).path


def refused_after_params_change(project: Path, override: str, stage: str, group: str) -> None:
    """Commit ``override`` without running it: release build refuses, naming ``stage`` and the params ``group``, and writes nothing."""
    sh(project, sys.executable, "-m", "pipeline.params", *BASE, override)
    commit(project, override)
    r = release_build(project)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert f"{stage}: changed deps: params.yaml (" in r.stderr and f"{group} modified" in r.stderr, r.stderr
    assert "fix: run `dvc repro repository`" in r.stderr
    assert not (project.parent / "store/releases").exists()


def test_a_committed_but_unrun_params_change_is_refused(project: Path) -> None:
    refused_after_params_change(project, "variants.throughput.dynamic_batching.max_queue_delay_us=500", "repository", "variants")
    # The fix it names works, and the release then says what the commit says.
    sh(project, sys.executable, "-m", "dvc", "repro", "repository")
    r = release_build(project, "--no-tag")
    assert r.returncode == 0, r.stdout + r.stderr
    shipped = project.parent / "store/releases/two/1/files/configs/throughput.pbtxt"
    assert "max_queue_delay_microseconds: 500" in shipped.read_text()


def test_a_stale_precision_choice_is_refused(project: Path) -> None:
    """choose is upstream of the repository (it reads the choice) and reads only the host record of the machine: checked."""
    refused_after_params_change(project, "choose.budget_s=30", "choose", "choose")


def test_a_model_file_rewritten_in_place_is_refused(project: Path) -> None:
    """A retrain writes new weights to the same path: no param, no dvc.lock entry changes; the source record does."""
    retrain_onnx(project / "models/two.onnx")
    r = release_build(project)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "source record artifacts/sources/model.json no longer matches the files it fingerprints: models/two.onnx changed" in r.stderr, r.stderr
    assert "fix: run `dvc repro repository`" in r.stderr
    assert not (project.parent / "store/releases").exists()


def test_after_repro_the_release_embeds_summaries_with_shas(project: Path) -> None:
    model_dir = project / "artifacts/model_repository/two"
    before = file_digest(model_dir / "1/model.onnx")[0]
    # A replaced ONNX file at the same model.path (new weights, no param change) reruns every model stage.
    retrain_onnx(project / "models/two.onnx")
    out = sh(project, sys.executable, "-m", "dvc", "repro", "repository").stdout
    assert set(harness.MODEL_STAGES) <= set(harness.ran(out)), out
    commit(project, "retrained")
    served = file_digest(model_dir / "1/model.onnx")[0]
    assert served != before
    configs = {p.stem: file_digest(p)[0] for p in sorted((model_dir / "configs").glob("*.pbtxt"))}
    # The bench stage needs a Triton server; its report, in the stage's format, measured exactly these files.
    measured = MeasuredModel("two", str(model_dir / "1/model.onnx"), "1", {v: str(model_dir / f"configs/{v}.pbtxt") for v in configs}, served, configs)
    bench = BenchRecord(measured, {"ort_p50_ms": 0.1, "variants": {"latency": {"c1_p50_ms": 0.2}}}).to_json()
    bench["variants"] = {"latency": {"points": {"c1": {}}}}
    (project / "artifacts/reports/bench.json").write_text(json.dumps(bench))
    r = release_build(project)  # not what dvc.lock records as the bench stage's out: refused
    assert r.returncode != 0 and "--bench artifacts/reports/bench.json (bench's out) differs from dvc.lock" in r.stderr, r.stdout + r.stderr
    for d, f in (("bench", "report.md"), ("bench_curves", "latency.csv")):  # its other outs, as if the bench stage had written them
        (project / "artifacts/reports" / d).mkdir(parents=True, exist_ok=True)
        (project / "artifacts/reports" / d / f).write_text("x\n")
    (project / "artifacts/metrics/bench.json").write_text("{}")
    sh(project, sys.executable, "-m", "dvc", "commit", "-f", "bench")

    r = release_build(project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "git tag: two@v1.0.0" in r.stdout
    m = json.loads((project.parent / "store/releases/two/1/manifest.json").read_text())
    assert m["dvc"]["checked"] is True and m["dvc"]["target"] == "repository"
    assert {"export", "parity", "repository"} <= set(m["dvc"]["stages"]) and "probe" not in m["dvc"]["stages"]
    assert "probe" in m["dvc"]["not_checked"] and all(s.startswith("engine@") for s in set(m["dvc"]["not_checked"]) - {"probe"})
    assert m["dvc"]["sources"] == {"data": "artifacts/sources/data.json", "model": "artifacts/sources/model.json", "tokenizer": "artifacts/sources/tokenizer.json"}

    parity = json.loads((project / "artifacts/reports/parity.json").read_text())
    assert m["parity"]["served"]["model.onnx"]["sha256"] == served == parity["artifacts"][m["parity"]["served"]["model.onnx"]["artifact"]]["sha256"]
    for kind, art in m["parity"]["artifacts"].items():
        assert set(art) <= {"pass", "status", "sha256", "outputs"}
        if art.get("status") == "passed":
            assert art["sha256"] == parity["artifacts"][kind]["sha256"]
            assert all(set(o) == {"max_abs", "atol"} for o in art["outputs"].values())
    assert m["bench"] == {"status": "measured", "report": "artifacts/reports/bench.json", "model_sha256": served, "configs_sha256": configs, "summary": bench["summary"]}


@pytest.mark.triton
def test_the_readme_journey_with_the_default_config(project: Path, tmp_path: Path) -> None:
    """Issue 28, item 4: `dvc repro` -> release build -> promote dev, staging, production -> verify -> a tritonserver
    serves production from the store -> a second version -> canary -> rollback, for a model whose two inputs and two
    outputs are read from the graph (the bench, `dvc metrics show` and `dvc exp show` on the way). The default config apart from the
    model, the bench's durations and window stability (its default phases on a tiny model take minutes: this suite's budget) and the
    canary's p99 bound (here it checks the path; test_release_canary judges the verdict); any refusal fails it."""
    import numpy as np
    import tritonclient.http as th

    from pipeline.serving.process import EmbeddedServer
    from pipeline.serving.tritonserver import validate_repository
    from tests.release.test_release_canary import served_versions

    store = str(project.parent / "store")

    def release(*args: str) -> str:
        return sh(project, sys.executable, "-m", "pipeline.cli", "release", *args, "--store", store).stdout

    def answers(url: str) -> tuple[tuple[int, ...], ...]:
        feeds = [th.InferInput(n, [2, 4], "FP32") for n in ("a", "b")]
        for f in feeds:
            f.set_data_from_numpy(np.ones((2, 4), np.float32))
        res = th.InferenceServerClient(url).infer("two", feeds)
        return tuple(res.as_numpy(n).shape for n in ("s", "p"))

    sh(project, sys.executable, "-m", "pipeline.params", *BASE, *SHORT_BENCH)  # bench-only keys: nothing upstream reruns
    repro = sh(project, sys.executable, "-m", "dvc", "repro")
    assert "Running stage 'repository'" not in repro.stdout
    assert "Running stage 'bench'" in repro.stdout, repro.stdout[-2000:]
    # The bench measured the shipped two-input graph, and its headline is a metric.
    bench = json.loads((project / "artifacts/reports/bench.json").read_text())
    assert bench["model"]["name"] == "two" and bench["model"]["sha256"] == file_digest(project / "artifacts/model_repository/two/1/model.onnx")[0]
    metrics = json.loads((project / "artifacts/metrics/bench.json").read_text())
    assert metrics == bench["summary"] and metrics["variants"]["latency"]["c1_p50_ms"] > 0, metrics
    # Every metrics file loads (a nested key named "error" used to make DVC report a load failure), and the
    # headline-only metrics keep `dvc exp show` to a width a terminal can show.
    shown = sh(project, sys.executable, "-m", "dvc", "metrics", "show")
    assert "failed to load" not in (shown.stdout + shown.stderr).lower(), shown.stdout + shown.stderr
    for name in ("export", "simplify", "fp16", "parity", "repository", "bench"):
        assert f"artifacts/metrics/{name}.json" in shown.stdout
    commit(project, "dvc repro")
    table = sh(project, sys.executable, "-m", "dvc", "exp", "show", "--no-pager", "--md").stdout
    cols = [c.strip() for c in next(ln for ln in table.splitlines() if ln.startswith("|")).strip("|").split("|")]
    metric_cols = cols[cols.index("Created") + 1 : next(i for i, c in enumerate(cols) if c.startswith("model."))]
    # 749 when whole reports were metrics; 68 now with the default profile's headlines (each stage adds its own)
    assert 20 <= len(metric_cols) <= 72, "\n".join(metric_cols)
    built = release("build")
    assert "built release two version 1" in built and "evidence from dvc.lock: repository = repository, parity = parity, bench = bench" in built, built
    assert "bench summary: recorded" in built and "git tag: two@v1.0.0" in built, built
    for env in ("dev", "staging", "production"):
        assert f"-> 1 in '{env}'" in release("promote", "--to", env)
    assert "all checksums match" in release("verify")
    production = project.parent / "store/envs/production"
    checked = validate_repository(production)
    assert checked.only_missing_backend and not checked.errors, checked.log  # a strict tritonserver accepts what production serves

    # A second version: a config change, its repository rebuilt; the bench of the first is not attached to it.
    sh(project, sys.executable, "-m", "pipeline.params", *BASE, *SHORT_BENCH, "variants.throughput.dynamic_batching.max_queue_delay_us=700", "release.canary.max_p99_ratio=5")
    sh(project, sys.executable, "-m", "dvc", "repro", "repository")
    commit(project, "a shorter queue delay")
    built = release("build")
    assert "built release two version 2" in built and "bench summary: absent" in built, built
    m = json.loads((project.parent / "store/releases/two/2/manifest.json").read_text())
    assert "the bench stage is out of date" in m["bench"]["reason"], m["bench"]
    assert "-> 2 in 'dev'" in release("promote", "--to", "dev")

    # Production as shipped, from the store, by a tritonserver (native/pipeline_ort stands in for its onnxruntime backend).
    with EmbeddedServer(production, "two", timeout_s=120, log_dir=tmp_path / "logs", ort_standin=True) as srv:
        assert answers(srv.http_url) == ((2, 4), (2, 4)) and served_versions(srv.http_url, "two") == [1]
        out = release("canary", "--env", "production", "--version", "2", "--reload", srv.http_url, "--duration", "4s")
        assert "verdict: PASSED: promoted" in out and served_versions(srv.http_url, "two") == [2], out
        out = release("rollback", "--env", "production", "--reload", srv.http_url)
        assert "rollback: two version 2 -> 1 in 'production'" in out and served_versions(srv.http_url, "two") == [1], out
        assert answers(srv.http_url) == ((2, 4), (2, 4))
    assert "all checksums match" in release("verify")
