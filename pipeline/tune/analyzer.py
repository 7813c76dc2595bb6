"""Model Analyzer's search beside ours, on the same server binary, stand-in backend, rows, objective and constraint.

Model Analyzer (MA) needs protobuf 4 where onnx needs protobuf 6, so it lives in a venv of its own (`bash
scripts/setup.sh --model-analyzer` makes ``.venv-ma``). It runs `model-analyzer profile` in local launch mode: it starts
the wheel's tritonserver with our stand-in in ``--backend-directory`` (MA loads each candidate through the load API's
config override, so the backend must be found there), and drives its own perf_analyzer with our request rows at
``tune.concurrency``. It writes its results table only with its summary report, so that report is not
skipped. Two traps, both handled here: MA passes ``triton_server_environment`` to perf_analyzer too, so
``LD_LIBRARY_PATH`` must keep libb64 (and end in ``:$LD_LIBRARY_PATH``, which MA expands); and perf_analyzer's default
10% stability never settles on a busy 2-core machine, so its flags match ours (time windows, 50%, 10 trials).

It gets ``tune.budget_s``, as our search does, and is stopped there. Its best configuration (the first row of its
results that meets the constraint; MA sorts them by the objective) becomes a TuneKnobs: MA searches instance count,
max_batch_size and dynamic batching, and leaves ORT threads and the graph level as shipped. Not installed, failing or
out of time: the record says so with MA's own error line, and the tune goes on without it.
"""

from __future__ import annotations

import csv
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import yaml

from pipeline.core.config import PipelineConfig, TuneObjective
from pipeline.records.tune import AnalyzerRun, TuneKnobs
from pipeline.repository.config import parse
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.install import error_lines, locate_tritonserver
from pipeline.serving.native_backend import onnxruntime_backend_dir, standin_env
from pipeline.serving.process import Watchdog, free_port, kill_group
from pipeline.tune.arena import ShippedArena

VENV = ".venv-ma"  # scripts/setup.sh --model-analyzer
MODEL = "tune_ma"  # the model MA profiles: the configured throughput variant, rendered by the repository's code
_RESULTS = "results/metrics-model-inference.csv"
INSTALL = "bash scripts/setup.sh --model-analyzer"


def locate(root: Path | None = None) -> Path | None:
    """``model-analyzer`` in the project's ``.venv-ma`` (or $PIPELINE_MODEL_ANALYZER), None when absent."""
    env = os.environ.get("PIPELINE_MODEL_ANALYZER")
    if env:
        return Path(env) if Path(env).is_file() else None
    exe = (root or Path.cwd()) / VENV / "bin" / "model-analyzer"
    return exe if exe.is_file() else None


def config(cfg: PipelineConfig, arena: ShippedArena, repo: Path, out: Path, exe: Path) -> dict:
    """MA's profile config (YAML) for the throughput variant's file, with our objective, constraint and rows."""
    t, ma = cfg.tune, cfg.tune.model_analyzer
    inst = locate_tritonserver()
    ports = [free_port()]
    ports += [free_port(set(ports))]
    ports += [free_port(set(ports))]
    objective = {"perf_throughput": 10} if t.objective == TuneObjective.perf_throughput else {"perf_latency_p99": 10}
    return {
        "model_repository": str(repo),
        "output_model_repository_path": str(out / "output_repository"),
        "override_output_model_repository": True,
        "export_path": str(out / "export"),
        "checkpoint_directory": str(out / "checkpoints"),  # else ./checkpoints in the working directory
        # Its per-configuration detailed reports (HTML and plots, several seconds of the run) are never read: the
        # results table comes with the summary.
        "skip_detailed_reports": True,
        "triton_launch_mode": "local",
        "triton_server_path": str(inst.binary),
        "perf_analyzer_path": str(exe.parent / "perf_analyzer"),
        "triton_http_endpoint": f"127.0.0.1:{ports[0]}",
        "triton_grpc_endpoint": f"127.0.0.1:{ports[1]}",
        "triton_metrics_url": f"http://127.0.0.1:{ports[2]}/metrics",
        "triton_server_flags": {"backend-directory": str(onnxruntime_backend_dir(inst))},
        "triton_server_environment": {**standin_env(), "LD_LIBRARY_PATH": ":".join([str(inst.libs), *pa_mod.lib_dirs()]) + ":$LD_LIBRARY_PATH"},
        "run_config_search_max_instance_count": ma.max_instance_count,
        "run_config_search_max_model_batch_size": ma.max_model_batch_size,
        "run_config_search_max_concurrency": ma.max_concurrency,
        "perf_analyzer_flags": {
            "measurement-mode": "time_windows",
            "measurement-interval": t.measurement_interval_ms,
            "stability-percentage": 50,
            "max-trials": cfg.bench.max_trials,
            "input-data": str(arena.input_json),
            **({"shape": [f"{k}:{','.join(map(str, v))}" for k, v in arena.shapes.items()]} if arena.shapes else {}),
        },
        "profile_models": {
            MODEL: {
                "cpu_only": True,
                "objectives": objective,
                "constraints": {"perf_latency_p99": {"max": t.constraints.perf_latency_p99}},
                "parameters": {"concurrency": list(t.concurrency)},
            }
        },
    }


def start_for_analyzer(k: TuneKnobs) -> TuneKnobs:
    """The configured variant without preferred batch sizes: MA keeps them when it lowers max_batch_size below them, a
    config Triton refuses ("Skipping illegal run configuration", which ends its search at once)."""
    return replace(k, preferred_batch_sizes=()) if k.preferred_batch_sizes is not None else k


def run(cfg: PipelineConfig, arena: ShippedArena, work: Path, log: Callable[[str], None] = print) -> AnalyzerRun:
    """Model Analyzer's search within ``tune.budget_s``; its best as a TuneKnobs, or why it did not run."""
    exe = locate()
    if exe is None:
        return AnalyzerRun(False, f"Model Analyzer is not installed ({VENV}/bin/model-analyzer): {INSTALL}")
    work.mkdir(parents=True, exist_ok=True)
    repo = work / "repository"
    arena.writer.write(repo, {MODEL: start_for_analyzer(arena.base_knobs).onto_variant(arena.base)})
    (work / "ma.yaml").write_text(yaml.safe_dump(config(cfg, arena, repo, work, exe), sort_keys=False))
    log(f"[tune] Model Analyzer: profile within {cfg.tune.budget_s:g} s ({exe})")
    t0 = time.monotonic()
    code, out = _profile(exe, work, cfg.tune.budget_s)
    wall = round(time.monotonic() - t0, 1)
    (work / "model-analyzer.log").write_text(out)
    if code is None:
        return AnalyzerRun(False, f"Model Analyzer did not finish within tune.budget_s={cfg.tune.budget_s:g} s (stopped)", wall_s=wall)
    if code != 0:
        return AnalyzerRun(False, f"Model Analyzer failed (exit {code}): {_error_line(out)}", wall_s=wall)
    return best(work, arena.base_knobs, wall)


def _profile(exe: Path, work: Path, budget_s: float) -> tuple[int | None, str]:
    """Run `model-analyzer profile`; (exit code, output), exit code None when stopped at the budget. Its servers go with
    it: MA and every process it started share one process group, killed on the way out (and by a watchdog if we die)."""
    log_path = work / "profile.out"
    with open(log_path, "wb") as f:
        proc = subprocess.Popen([str(exe), "profile", "-f", str(work / "ma.yaml")], cwd=work, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    dog = Watchdog(proc.pid)
    try:
        code: int | None = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        kill_group(proc, grace_s=10.0)
        dog.stop()
    return code, log_path.read_text(errors="replace")


def _error_line(out: str) -> str:
    """MA's own last error line (or its last line)."""
    errs = [ln.strip() for ln in out.splitlines() if "ERROR" in ln or "Error" in ln or "error:" in ln]
    errs = errs or error_lines(out, 1) or [ln.strip() for ln in out.splitlines() if ln.strip()][-1:]
    return errs[-1] if errs else "(no output)"


def best(work: Path, base: TuneKnobs, wall: float) -> AnalyzerRun:
    """MA's best configuration that met the constraint, from its results table (sorted by its objective, best first)."""
    path = work / "export" / _RESULTS
    if not path.is_file():
        return AnalyzerRun(False, f"Model Analyzer wrote no results ({path})", wall_s=wall)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    ok = [r for r in rows if (r.get("Satisfies Constraints") or "").strip().lower() in ("yes", "true", "satisfies")]
    if not ok:
        return AnalyzerRun(False, f"no configuration Model Analyzer measured met the constraint ({len(rows)} measured)", wall_s=wall, measured=len(rows))
    top = ok[0]
    name = (top.get("Model Config Path") or "").strip()
    cfg = parse(work / "output_repository" / name / "config.pbtxt")
    db = cfg.dynamic_batching if cfg.HasField("dynamic_batching") else None
    knobs = TuneKnobs(
        cfg.instance_group[0].count if cfg.instance_group else 1,
        cfg.max_batch_size,
        tuple(db.preferred_batch_size) if db is not None else None,
        db.max_queue_delay_microseconds if db is not None else None,
        base.intra_op_threads,
        base.inter_op_threads,
        base.graph_optimization_level,
    )
    return AnalyzerRun(True, "", knobs, name, wall, len(rows), _float(top, "Throughput (infer/sec)"), _float(top, "p99 Latency (ms)"))


def _float(row: dict[str, str], key: str) -> float | None:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None
