"""Measuring one TorchServe deployment: perf_analyzer runs, its cold start, and its answers against Triton's.

perf_analyzer's ``--service-kind=torchserve`` sends each step's body file as the multipart part ``data`` to
``/predictions/<model>`` and times each call (its client-side send/receive split stays empty: it logs "Timer not
set correctly" once per request, which we count instead of keeping). TorchServe's own Prometheus counters around
each run give the requests it served, their time in its queue and in inference, and the 4xx/5xx answers: a
handler error at inference is a failed request, counted here.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.bench.measure.inputs import http_inputs
from pipeline.bench.measure.results import Point
from pipeline.bench.peers.results import Agreement
from pipeline.bench.readiness.results import ColdStart
from pipeline.bench.measure.servers import Target
from pipeline.core.config import BenchConfig, ToleranceConfig
from pipeline.parity.report import resolve
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.memory import RssSampler
from pipeline.serving.torchserve_process import TorchServeServer

Feed = dict[str, np.ndarray]
_TIMER_NOISE = "Timer not set correctly"
COLD_SOURCE = "a fresh TorchServe: spawn -> /ping healthy, then the registration through the management API until its workers are up"


@dataclass
class TsTarget:
    """A registered TorchServe model on a running server, and that server's RSS sampler."""

    server: TorchServeServer
    model: str
    memory: RssSampler | None = None


def _delta(before: dict[str, float], after: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def split(before: dict[str, float], after: dict[str, float], model: str) -> dict[str, float]:
    """TorchServe's own view of a run, from its counter deltas: requests served, failed answers (4xx + 5xx, server-wide:
    one model is measured at a time), and per request its queue time and inference latency (ms)."""
    n = _delta(before, after, f"ts_inference_requests|{model}")
    failed = _delta(before, after, "Requests4XX") + _delta(before, after, "Requests5XX")
    out = {"torchserve_requests": n, "torchserve_failed": failed}
    if n > 0:
        out["torchserve_queue_ms"] = _delta(before, after, f"ts_queue_latency_microseconds|{model}") / n / 1000
        out["torchserve_inference_ms"] = _delta(before, after, f"ts_inference_latency_microseconds|{model}") / n / 1000
    return out


def perf_run(pa: pa_mod.PerfAnalyzer, t: TsTarget, c: int, input_json: Path, work_dir: Path, tag: str, b: BenchConfig, window_ms: int) -> Point:
    """perf_analyzer against ``t`` at concurrency ``c`` in ``window_ms`` windows; a failed answer makes the point invalid."""
    csv_path = work_dir / f"{tag}_c{c}.csv"
    opts = pa_mod.PerfOptions(c, measurement_interval_ms=window_ms, stability_percentage=b.rounds.stability_percentage, max_trials=b.max_trials, service_kind="torchserve")
    cmd = pa_mod.build_command(pa, t.model, t.server.inference_url, input_json, csv_path, opts)
    before, t0 = t.server.metrics(), time.monotonic()
    run = pa_mod.run(pa, cmd, c, csv_path, timeout_s=opts.deadline_s(b.perf_timeout_s), required=pa_mod.CLIENT_REQUIRED)
    t1, after = time.monotonic(), t.server.metrics()
    lines = run.log.splitlines()
    kept = [ln for ln in lines if _TIMER_NOISE not in ln]
    note = f"\n[{len(lines) - len(kept)} lines '{_TIMER_NOISE}' left out: perf_analyzer's send/receive split, not its latency]\n"
    (work_dir / f"{tag}_c{c}.log").write_text(" ".join(cmd) + "\n\n" + "\n".join(kept) + note)
    ts = split(before, after, t.model)
    tail = " | ".join([ln for ln in kept if ln.strip()][-3:])
    valid, reason = run.valid, "" if run.valid else f"exit {run.returncode}: {tail}"
    if ts["torchserve_failed"]:
        valid, reason = False, f"{ts['torchserve_failed']:.0f} requests failed on TorchServe (HTTP 4xx/5xx)" + (f"; {reason}" if reason else "")
    metrics = dict(run.row, loadavg_1m=round(os.getloadavg()[0], 2), **{k: round(v, 4) for k, v in ts.items()}) if valid else {}
    mem = t.memory.window(t0, t1) if t.memory else None
    return Point(c, valid, reason, metrics, None, ts["torchserve_failed"], memory={"rss_peak_mb": mem.peak_mb, "rss_median_mb": mem.median_mb} if mem else {})


def body(row: Feed) -> bytes:
    """A row as the handler's JSON body."""
    return json.dumps({k: v.tolist() for k, v in row.items()}).encode()


def cold_start(t: TsTarget, archive: str, batch_size: int, delay_ms: int, workers: int, row: Feed, requests: int, timeout_s: float) -> ColdStart:
    """Register ``archive`` (the cold load: workers start, the handler loads the model), then the first request and
    ``requests`` more the same way, on one open connection.

    Raises:
        ToolError: the registration failed (TorchServe's answer and the worker log).
    """
    srv = t.server
    out = ColdStart(t.model, False, server_start_s=round(srv.ready_at - srv.spawned_at, 3), requests=requests)  # TorchServe has no warmup
    out.load_s = round(srv.register(t.model, archive, batch_size, delay_ms, workers, timeout_s), 3)
    out.rss_loaded_mb = rss_mb([p for p in (srv.java_pid(), *srv.worker_pids(t.model)) if p])
    data = body(row)
    srv.ping()  # the inference connection is open before the first request: not in its time (as Triton's cold start)
    t0 = time.perf_counter()
    status, answer = srv.predict(t.model, data)
    out.first_ms = round((time.perf_counter() - t0) * 1000, 3) if status == 200 else None
    warm = []
    for _ in range(requests):
        t0 = time.perf_counter()
        status, _ = srv.predict(t.model, data)
        if status == 200:
            warm.append((time.perf_counter() - t0) * 1000)
    out.warm_p50_ms = round(statistics.median(warm), 3) if warm else None
    return out


def rss_mb(pids: list[int]) -> float | None:
    """Summed RSS (MB) of ``pids`` now (None if none is alive)."""
    import psutil

    total, seen = 0, False
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
            seen = True
        except psutil.Error:
            continue
    return round(total / 2**20, 2) if seen else None


def triton_answers(t: Target, rows: list[Feed], outputs: list[str]) -> list[dict[str, np.ndarray]]:
    """Triton's answer to every row (HTTP, the same client path a user takes)."""
    out = []
    with t.client() as client:
        for row in rows:
            r = client.raw.infer(t.model, http_inputs(row))
            out.append({n: r.as_numpy(n) for n in outputs})
    return out


def _stat(x: np.ndarray, stat: str, quantile: float) -> float:
    if stat == "mean":
        return float(np.mean(x))
    if stat == "median":
        return float(np.median(x))
    if stat == "quantile":
        return float(np.quantile(x, quantile))
    return float(np.max(x))


def agreement(t: TsTarget, rows: list[Feed], reference: list[dict[str, np.ndarray]], tol: ToleranceConfig) -> Agreement:
    """Every row's answer from ``t`` against Triton's, by the parity tolerance's rule: an output fails only when its
    error statistic exceeds both atol and rtol (Polygraphy's semantics, as the parity gate judges files)."""
    names = list(reference[0]) if reference else []
    got: dict[str, list[np.ndarray]] = {n: [] for n in names}
    want: dict[str, list[np.ndarray]] = {n: [] for n in names}
    failed, first, sizes = 0, "", []
    for row, ref in zip(rows, reference):
        status, data = t.server.predict(t.model, body(row))
        if status != 200:
            failed += 1
            first = first or f"HTTP {status}: {data.decode(errors='replace')[:200]}"
            continue
        sizes.append(len(data))
        answer = json.loads(data)
        for n in names:
            got[n].append(np.asarray(answer[n], dtype=np.float64).reshape(ref[n].shape))
            want[n].append(ref[n].astype(np.float64))
    out = Agreement(len(rows), failed, first_error=first, response_bytes=round(float(np.mean(sizes)), 1) if sizes else 0.0)
    ok = failed == 0 and bool(names)
    for n in names:
        tl = resolve(tol, n)
        out.tolerance[n] = {"atol": tl["atol"], "rtol": tl["rtol"], "stat": tl["stat"]}
        if not got[n]:
            ok = False
            continue
        a, r = np.concatenate([g.ravel() for g in got[n]]), np.concatenate([w.ravel() for w in want[n]])
        err = np.abs(a - r)
        rel = err / (np.abs(r) + 2.220446049250313e-16)  # Polygraphy's epsilon for zero references
        out.abs_error[n] = _stat(err, tl["stat"], tl["quantile"])
        out.rel_error[n] = _stat(rel, tl["stat"], tl["quantile"])
        ok = ok and (out.abs_error[n] <= tl["atol"] or out.rel_error[n] <= tl["rtol"])
    out.passed = ok
    return out
