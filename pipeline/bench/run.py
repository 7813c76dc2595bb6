"""Bench stage: perf_analyzer against a real Triton, with an in-process ONNX Runtime baseline.

    python -m pipeline.stages.bench --params params.yaml \
        --repository artifacts/model_repository --out-json artifacts/reports/bench.json \
        --out-dir artifacts/reports/bench --curves-dir artifacts/reports/bench_curves

For every shipped variant (configs/<variant>.pbtxt) it sweeps bench.concurrency with
real sample inputs, records client percentiles, throughput, the server's queue/compute
split and the batch size actually formed; beside it, ORT timed in this process on the
same ONNX file, inputs and thread counts. The headline ratios are measured in paired
rounds (served runs bracketed by in-process timings, see measure.bracketed_rounds), because
this VM's speed drifts within a minute. Writes bench.json (dvc metrics), per-variant
curves (dvc plots), a markdown report with a PNG, and a diagnosis.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata as md
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import onnx

from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.embedded import BACKENDS, find_shipped, read_config, write_config
from pipeline.bench import measure, report, tune
from pipeline.bench.servers import EmbeddedMode, ExternalMode, Target
from pipeline.core import stage
from pipeline.core.atomic import atomic_path, remove_stale, write_json, write_text
from pipeline.core.config import PipelineConfig, load_config
from pipeline.core.errors import BenchError, ConfigError, PipelineError
from pipeline.core.atomic import file_digest
from pipeline.core.samples import input_specs, load_samples
from pipeline.core.specs import graph_io

SCHEMA = 1


def machine(pa: pa_mod.PerfAnalyzer) -> dict[str, Any]:
    """CPU, cores, load and tool versions: the conditions every number was taken under."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), platform.processor())
    versions = {"python": platform.python_version()}
    for dist in ("onnxruntime", "tritonclient", "nvidia-pytriton", "numpy"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = "absent"
    r = subprocess.run([str(pa.binary), "--version"], env=pa.env(), capture_output=True, text=True, timeout=30)
    words = (r.stdout + r.stderr).strip().removeprefix("Perf Analyzer Version ").split()
    versions["perf_analyzer"] = words[0] if words else "?"
    return {
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "cores_available": measure.cpu_budget(),
        "platform": platform.platform(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
    }


def _variant_order(configs: dict[str, Path]) -> list[str]:
    known = [v for v in ("latency", "throughput") if v in configs]
    return known + [v for v in configs if v not in known]


def run_bench(cfg: PipelineConfig, repository: Path, out_json: Path, out_dir: Path, curves_dir: Path, tuned_config: Path | None = None) -> dict:
    """Benchmark the shipped model ``repository/<model.name>``; write every output; return bench.json's data.

    Raises:
        BenchError / ToolError / ConfigError with the fix, when anything cannot be measured.
    """
    b = cfg.bench
    if b.server not in ("embedded", "external"):
        raise ConfigError(f"bench.server={b.server!r} is not a server mode", fix="set bench.server=embedded or bench.server=external")
    if b.embedded_backend not in BACKENDS:
        raise ConfigError(f"bench.embedded_backend={b.embedded_backend!r} is not a stand-in backend", fix=f"set bench.embedded_backend to one of {', '.join(BACKENDS)}")
    if b.server == "external" and not b.url:
        raise ConfigError("bench.server=external needs bench.url", fix="set bench.url=<host>:<http port> of the running Triton")
    if b.input_shapes not in ("as_sampled", "uniform"):
        raise ConfigError(f"bench.input_shapes={b.input_shapes!r}", fix="set bench.input_shapes=as_sampled or uniform")
    if b.paired_rounds < 0 or b.paired_max_rounds < b.paired_rounds or b.paired_max_drift <= 0:
        raise ConfigError(
            f"bench.paired_rounds={b.paired_rounds}, paired_max_rounds={b.paired_max_rounds}, paired_max_drift={b.paired_max_drift}",
            fix="use 0 <= paired_rounds <= paired_max_rounds and paired_max_drift > 0 (e.g. 5, 10, 0.10); paired_rounds=0 turns pairing off",
        )
    pt_rounds, pt_max, pt_conc = b.paired_throughput_rounds, b.paired_throughput_max_rounds, b.paired_throughput_concurrency
    if pt_rounds < 0 or pt_max < pt_rounds or any(int(c) < 1 for c in pt_conc):
        raise ConfigError(
            f"bench.paired_throughput_rounds={pt_rounds}, paired_throughput_max_rounds={pt_max}, paired_throughput_concurrency={list(pt_conc)}",
            fix="use 0 <= paired_throughput_rounds <= paired_throughput_max_rounds and concurrencies >= 1 (e.g. 3, 6, [8, 16]); "
            "paired_throughput_rounds=0 turns pairing off",
        )
    if b.tune and (b.server != "embedded" or b.tune_max_rounds < 1 or b.tune_concurrency < 1):
        raise ConfigError(
            f"bench.tune=true with bench.server={b.server!r}, tune_max_rounds={b.tune_max_rounds}, tune_concurrency={b.tune_concurrency}",
            fix="tuning serves each candidate itself: use bench.server=embedded, tune_max_rounds >= 1 and tune_concurrency >= 1, "
            "or set bench.tune=false",
        )
    remove_stale(out_json, out_dir, curves_dir)  # a failed run must not leave the last run's numbers behind
    pa = pa_mod.locate_perf_analyzer()  # fail before starting any server
    shipped = find_shipped(repository / cfg.model.name)
    configs = {v: read_config(shipped.configs[v]) for v in _variant_order(shipped.configs)}
    if b.tune and "throughput" not in configs:
        raise ConfigError(f"bench.tune=true but {shipped.model_dir} has no throughput variant (variants: {sorted(configs)})",
                          fix="build the repository with a throughput variant, or set bench.tune=false")  # fmt: skip
    graph_in, _ = graph_io(onnx.load(str(shipped.onnx), load_external_data=False))
    graph_dtypes = {s.name: s.dtype for s in graph_in}
    main_cfg = configs.get("latency") or next(iter(configs.values()))
    batched = main_cfg.max_batch_size > 0
    input_names = [i.name for i in main_cfg.input]

    # The same specs rule as every other stage: model.inputs, else the shipped graph's own inputs (model=onnx).
    samples = [{k: v for k, v in f.items() if k in input_names} for f in load_samples(cfg.model, input_specs(cfg.model, graph_in))]
    rows = measure.request_rows(samples, batched)
    if b.input_shapes == "uniform":
        rows = measure.uniform_rows(rows)
    # Cast to the graph's dtypes: the data hook may give int32 where the model takes int64.
    rows = [{k: v.astype(graph_dtypes.get(k, v.dtype)) for k, v in r.items()} for r in rows]
    # --shape pins one shape for every request; with mixed shapes the JSON's per-step shapes must rule.
    one_shape = len({measure.shape_key(r) for r in rows}) == 1
    shapes = {k: list(v.shape[1:] if batched else v.shape) for k, v in rows[0].items()} if one_shape else {}

    res: dict[str, Any] = {"schema": SCHEMA, "machine": machine(pa)}
    # The sha256 of what was measured: a release embeds this report only if its files have these digests.
    res["model"] = {
        "name": shipped.name, "onnx": str(shipped.onnx), "version": shipped.version, "sha256": file_digest(shipped.onnx)[0],
        "configs": {v: str(p) for v, p in shipped.configs.items()},
        "configs_sha256": {v: file_digest(p)[0] for v, p in shipped.configs.items()},
    }
    res["inputs"] = {"requests": len(rows), "policy": b.input_shapes, "distinct_shapes": len({measure.shape_key(r) for r in rows})}
    res["settings"] = asdict(b)

    print(f"[bench] in-process ONNX Runtime baseline on {shipped.onnx.name}", flush=True)
    lat_s = measure.OrtSettings.from_config(main_cfg)
    thr_s = measure.OrtSettings.from_config(configs.get("throughput", main_cfg))
    res["baseline"] = {
        "latency": measure.baseline_latency(shipped.onnx, lat_s, rows, b.warmup_runs, b.baseline_runs),
        "throughput": measure.baseline_throughput(shipped.onnx, thr_s, rows, b.baseline_batch_sizes, b.baseline_seconds),
    }

    with tempfile.TemporaryDirectory(prefix="bench-work-") as work_s:
        work = Path(work_s)
        (work / "logs").mkdir()
        input_json = pa_mod.write_input_data(work / "perf_input.json", rows, batched)
        mode = (
            EmbeddedMode(shipped.model_dir, b.protocol, b.server_timeout_s, work / "logs", b.embedded_backend)
            if b.server == "embedded"
            else ExternalMode(b.url or "", shipped.name, shipped.configs, "http")
        )
        try:
            res["server"] = {"mode": mode.mode, "description": mode.description}
            if isinstance(mode, EmbeddedMode):
                res["server"]["backend"] = mode.backend
                res["server"]["config_changes"] = mode.changes
            res["variants"] = {}
            all_points: dict[str, list[measure.Point]] = {}
            sess = measure.ort_session(shipped.onnx, lat_s)  # the bench process's own session, as in the baseline

            def run(t: Target, conc: list[int], tag: str, interval_ms: int | None = None) -> list[measure.Point]:
                return measure.sweep(pa, b, t.model, t.http_url, t.perf_url, input_json, shapes, conc, work / "logs", tag,
                                     interval_ms, t.metrics_url, rows[0])  # fmt: skip

            def ort_p50() -> float:
                return measure.percentiles(measure.time_runs(sess, rows, b.warmup_runs, b.baseline_runs))["p50_ms"]

            for variant in configs:
                with mode.serve(variant) as t:
                    res["server"]["triton_version"] = t.version
                    pts = run(t, b.concurrency, variant)
                    if variant == "latency" and b.paired_rounds > 0:
                        print(f"[bench] latency c=1 paired with in-process ORT: until {b.paired_rounds} round(s) count, at most {b.paired_max_rounds}", flush=True)
                        # Embedded: the stand-in's time inside ORT during the served run is a third gauge.
                        res["paired_c1"] = measure.paired_c1(
                            lambda i: run(t, [1], f"latency_paired{i}", b.paired_measurement_interval_ms)[0],
                            ort_p50, b.paired_rounds, b.paired_max_rounds, b.paired_max_drift, mode.in_server_ort_key,
                        )  # fmt: skip
                res["variants"][variant] = {"points": {f"c{p.concurrency}": _point(p) for p in pts}}
                all_points[variant] = pts
            # The throughput gauge (paired rounds, tuning): in-process ORT at the baseline's best batch size, with the
            # throughput variant's settings, timed as long as one perf_analyzer window of the rounds. Its session is
            # opened on first use: a run with neither pairing nor tuning never needs it.
            thr_sess = functools.cache(lambda: measure.ort_session(shipped.onnx, thr_s))
            best_batches = measure.same_shape_batches(rows, res["baseline"]["throughput"]["best_batch"])

            def ort_best() -> float:
                return measure.infer_per_s(thr_sess(), best_batches, b.paired_measurement_interval_ms / 1000)

            pair = ["latency", "throughput"]
            if isinstance(mode, EmbeddedMode) and set(pair) <= configs.keys() and pt_rounds > 0 and pt_conc:
                print(f"[bench] throughput vs latency variant paired at c={list(pt_conc)}, both variants in one server: "
                      f"until {pt_rounds} round(s) count, at most {pt_max}", flush=True)  # fmt: skip
                with mode.serve_together(pair) as ts:
                    # A fresh server's first run per model pays first-request costs (allocations for each batch shape): discarded.
                    for v in pair:
                        run(ts[v], [max(pt_conc)], f"paired_warmup_{v}", b.paired_measurement_interval_ms)
                    res["paired_throughput"] = measure.paired_throughput(
                        lambda v, c, i: run(ts[v], [c], f"paired{i}_{v}", b.paired_measurement_interval_ms)[0],
                        ort_best,
                        [int(c) for c in pt_conc], pt_rounds, pt_max, b.paired_max_drift,
                    )  # fmt: skip
            # One variant without a valid point is a finding for the report; none at all is a failure.
            if not any(p.valid for pts in all_points.values() for p in pts):
                measure.check_readiness([p for pts in all_points.values() for p in pts], "any variant")
            chosen = None
            if b.tune:
                res["tuning"], chosen = tune.tune(mode, pa, b, input_json, shapes, work / "logs", ort_best)
        except PipelineError as e:
            # Keep perf_analyzer's and the server's logs (outside artifacts/) so the failure can be read.
            kept = Path(tempfile.mkdtemp(prefix="bench-failed-logs-"))
            shutil.copytree(work / "logs", kept, dirs_exist_ok=True)
            e.details["logs kept in"] = kept
            raise type(e)(e.what, e.fix, e.details) from None
        finally:
            mode.close()
        # Again after the sweep: the ratio uses the faster of the two in-process p50s, so drift in machine
        # load between baseline and sweep can only make the served numbers look worse, never better.
        again = measure.baseline_latency(shipped.onnx, lat_s, rows, b.warmup_runs, b.baseline_runs)
        res["baseline"]["latency_after"] = again
        if again["p50_ms"] < res["baseline"]["latency"]["p50_ms"]:
            res["baseline"]["latency"], res["baseline"]["latency_after"] = again, res["baseline"]["latency"]
        res["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        res["ratios"] = report.ratios(res)
        res["summary"] = summary(res)
        res["diagnosis"] = report.diagnose(res, configs, graph_dtypes, measure.cpu_budget(), b.queue_share_threshold, b.queue_min_ms)

        with atomic_path(out_dir) as tmp:
            report.write_outputs(res, tmp)
            (tmp / "logs").mkdir()
            for f in (work / "logs").iterdir():
                os.replace(f, tmp / "logs" / f.name)
            for v, p in shipped.configs.items():
                write_text(tmp / "configs" / f"{v}.pbtxt", p.read_text())
            if chosen is not None:
                tuned = tune.shipped_form(configs["throughput"], res["tuning"]["chosen"])
                # Keep the shipped file's explanatory header (graph level meaning etc.) above ours.
                shipped_header = "".join(ln + "\n" for ln in shipped.configs["throughput"].read_text().splitlines() if ln.startswith("#"))
                header = f"# Tuned by the bench stage (concurrency {b.tune_concurrency}, p99 budget {b.latency_budget_ms} ms): {res['tuning']['chosen']}\n"
                write_config(tmp / "tuned" / "throughput.pbtxt", tuned, header + shipped_header)
        with atomic_path(curves_dir) as tmp:
            tmp.mkdir()
            for v in res["variants"]:
                write_text(tmp / f"{v}.csv", report.curves_csv(res, v))
        if chosen is not None and tuned_config is not None:
            # Explicit request (e.g. --tuned-config <repo>/<model>/configs/throughput.pbtxt): write it there too.
            shutil.copy2(out_dir / "tuned" / "throughput.pbtxt", tuned_config)
    write_json(out_json, res)
    return res


def summary(res: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers (dvc metrics, and what a release manifest embeds): ratios, and per variant c=1 and peak."""
    def r(x: Any) -> Any:
        return round(x, 4) if isinstance(x, float) else x

    variants = {}
    for name, v in res["variants"].items():
        pts = [p for p in v["points"].values() if p.get("valid")]
        c1 = v["points"].get("c1") or {}
        variants[name] = {
            "c1_p50_ms": r(c1.get("p50_ms")), "c1_p99_ms": r(c1.get("p99_ms")),
            "peak_infer_s": r(max((p["throughput_infer_s"] for p in pts), default=None)),
        }
    return {
        "server": res["server"]["mode"],
        "ort_p50_ms": r(res["baseline"]["latency"]["p50_ms"]),
        "ort_best_infer_s": r(res["baseline"]["throughput"].get("best_infer_s")),
        "ratios": {k: r(v) for k, v in res["ratios"].items() if not k.endswith(("_unpaired", "_rounds_counted"))},
        "variants": variants,
    }


def _point(p: measure.Point) -> dict:
    d: dict[str, Any] = dict(p.metrics)
    d.update(concurrency=p.concurrency, valid=p.valid, reason=p.reason, avg_batch=p.avg_batch, failed_requests=p.failed_requests)
    return d
