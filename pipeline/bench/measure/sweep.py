"""perf_analyzer sweeps against a live server, with Triton's own counters around each run.

Every served number in the report comes from here: perf_analyzer's client percentiles,
throughput and server queue/compute split (--verbose-csv), Triton's statistics API
(inference_count / execution_count = the average batch actually formed) and, for the embedded
python stand-in, its own timers from Triton's /metrics (time inside ONNX Runtime).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.bench.measure import tritonmetrics as tm
from pipeline.bench.measure.inputs import http_inputs
from pipeline.stats.ort import Feed
from pipeline.bench.measure.results import Point
from pipeline.bench.measure.servers import Target
from pipeline.core.config import BenchConfig
from pipeline.core.errors import BenchError
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.client import TritonClient, metrics_text
from pipeline.serving.embedded import STANDIN_FLUSH_S
from pipeline.serving.memory import Window

STANDIN_COUNTERS = {
    "pipeline_standin_ort_run_ns": "ort_ns",
    "pipeline_standin_execute_ns": "execute_ns",
    "pipeline_standin_executions": "executions",
}


def model_stats(client: TritonClient, model: str) -> dict[str, float]:
    """Cumulative counters from Triton's statistics API (inference and execution counts, ns); empty if unreachable."""
    data = client.model_statistics(model)
    if not data.get("model_stats"):
        return {}
    st = data["model_stats"][0]
    inf = st.get("inference_stats", {})

    # Over gRPC, counters come as strings and zero ones are left out (protobuf JSON): both read as numbers here.
    def n(d: dict, key: str) -> float:
        return float(d.get(key, 0) or 0)

    return {
        "inference_count": n(st, "inference_count"),
        "execution_count": n(st, "execution_count"),
        "success_count": n(inf.get("success", {}), "count"),
        "success_ns": n(inf.get("success", {}), "ns"),
        "fail_count": n(inf.get("fail", {}), "count"),
        "queue_ns": n(inf.get("queue", {}), "ns"),
        "compute_infer_ns": n(inf.get("compute_infer", {}), "ns"),  # the backend's own time inside ORT (pipeline_ort)
    }


def standin_counters(metrics_url: str, model: str) -> dict[str, float]:
    """The embedded stand-in's cumulative timers from Triton's /metrics (empty if absent or unreachable)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = metrics_text(metrics_url)
    if not text:
        return {}
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            key = STANDIN_COUNTERS.get(sample.name.removesuffix("_total"))
            if key and sample.labels.get("model") == model:
                out[key] = out.get(key, 0.0) + sample.value  # summed over instances
    return out


def flush_standin(client: TritonClient, model: str, row: Feed) -> bool:
    """Make the stand-in publish every execution so far: one request after its flush interval.

    The stand-in flushes its timers from inside ``execute`` once ``STANDIN_FLUSH_S`` has
    passed, so a request sent that long after a run flushes everything up to and including
    itself. Returns False if the request failed (the counters are then not lined up).
    """
    from tritonclient.utils import InferenceServerException

    time.sleep(STANDIN_FLUSH_S + 0.05)
    inputs = http_inputs(row)
    try:
        client.raw.infer(model, inputs)
    except (InferenceServerException, OSError):
        return False
    return True


def standin_split(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per execution over a run: ms inside ORT and ms inside the stub's execute (empty without counters)."""
    n = after.get("executions", 0.0) - before.get("executions", 0.0)
    if not n or not all(k in after for k in STANDIN_COUNTERS.values()):
        return {}
    ms = {k: (after[k] - before.get(k, 0.0)) / n / 1e6 for k in ("ort_ns", "execute_ns")}
    return {"standin_ort_ms": ms["ort_ns"], "standin_execute_ms": ms["execute_ns"], "standin_executions": n}


@dataclass
class Sweeper:
    """Everything a perf_analyzer run needs besides the server and the concurrency."""

    pa: pa_mod.PerfAnalyzer
    bench: BenchConfig
    input_json: Path
    shapes: dict[str, list[int]]
    work_dir: Path  # perf_analyzer's CSVs and logs
    # A request that makes the embedded python stand-in flush its timers (None: no stand-in split).
    probe_row: Feed | None = None
    log: Callable[[str], None] = print  # each run's one line (the progress display prints it above its live line)

    def run(self, t: Target, concurrency: list[int], tag: str, interval_ms: int | None = None, stability: int | None = None) -> list[Point]:
        """perf_analyzer on ``t`` at each concurrency; unstable or failed runs are kept as invalid points.

        ``interval_ms`` and ``stability`` override bench.sweep.measurement_interval_ms and bench.sweep.stability_percentage
        (the rounds use short windows and a looser check: their interval measures the noise).
        With a ``probe_row`` and a target that publishes metrics (the python stand-in), each point also
        gets the stand-in's split of compute time, its counters lined up with the run by :func:`flush_standin`.
        """
        b = self.bench
        timed = bool(t.standin_timers and t.metrics_url and self.probe_row)
        points = []
        # Statistics over HTTP where the server has it, else over gRPC (an external server given by that endpoint).
        with TritonClient(t.http_url) if t.http_url else TritonClient(t.perf_url, "grpc") as client:
            for c in concurrency:
                csv_path = self.work_dir / f"{tag}_c{c}.csv"
                opts = pa_mod.PerfOptions(
                    c,
                    protocol=b.protocol,
                    measurement_interval_ms=interval_ms or b.sweep.measurement_interval_ms,
                    stability_percentage=stability or b.sweep.stability_percentage,
                    max_trials=b.max_trials,
                    shapes=self.shapes,
                )
                cmd = pa_mod.build_command(self.pa, t.model, t.perf_url, self.input_json, csv_path, opts)
                # Counters were flushed after the previous run (or nothing ran yet): nothing is pending now.
                before, t_before = model_stats(client, t.model), standin_counters(t.metrics_url, t.model) if timed else {}
                m_before, t0 = tm.scrape(t.metrics_url, t.model), time.monotonic()
                run = pa_mod.run(self.pa, cmd, c, csv_path, timeout_s=opts.deadline_s(b.perf_timeout_s))
                # Both before the flush request, so Triton's counts are perf_analyzer's only.
                t1, after, m_after = time.monotonic(), model_stats(client, t.model), tm.scrape(t.metrics_url, t.model)
                flushed = timed and self.probe_row is not None and flush_standin(client, t.model, self.probe_row)
                t_after = standin_counters(t.metrics_url, t.model) if flushed else {}
                (self.work_dir / f"{tag}_c{c}.log").write_text(" ".join(cmd) + "\n\n" + run.log)
                points.append(_point(run, before, after, t_before, t_after))
                p = points[-1]
                if not p.valid:
                    t.check_alive()  # a dead server of our own is the reason, not the address
                observe(p, tm.delta(m_before, m_after), t.memory.window(t0, t1) if t.memory else None, b.queue.min_ms)
                status = f"p50 {p.metrics['p50_ms']:.2f} ms, {p.metrics['throughput_infer_s']:.1f} infer/s" if p.valid else f"INVALID ({p.reason})"
                self.log(f"[bench] {tag} c={c}: {status}")
        return points


def _point(run: pa_mod.PerfRun, before: dict[str, float], after: dict[str, float], t_before: dict[str, float], t_after: dict[str, float]) -> Point:
    """One run's point: perf_analyzer's row, the batch Triton formed, and failures Triton counted."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    avg_batch = delta["inference_count"] / delta["execution_count"] if delta.get("execution_count") else None
    failed = delta.get("fail_count", 0.0)
    valid, reason = run.valid, run.reason()
    if valid and failed:
        valid, reason = False, f"{failed:.0f} requests failed on the server"
    # The 1-minute load average after the run: on a shared machine it tells which points others disturbed.
    metrics = dict(run.row, loadavg_1m=round(os.getloadavg()[0], 2), **standin_split(t_before, t_after)) if valid else {}
    return Point(run.concurrency, valid, reason, metrics, avg_batch, failed)


def observe(p: Point, triton: dict[str, float], mem: Window | None, floor_ms: float) -> None:
    """Put Triton's /metrics deltas, their cross-check against perf_analyzer's split, and the RSS window on ``p``."""
    p.triton = {k: round(v, 4) for k, v in triton.items()}
    if p.valid:
        p.agree = {k: round(v, 4) for k, v in tm.cross_check(triton, p.metrics, p.avg_batch, floor_ms).items()}
    p.memory = {"rss_peak_mb": mem.peak_mb, "rss_median_mb": mem.median_mb} if mem else {}


def check_readiness(points: list[Point], tag: str) -> None:
    """Raise BenchError when there are points and none is valid: there is nothing to report."""
    if points and not any(p.valid for p in points):
        unstable = all("stable" in p.reason for p in points)
        raise BenchError(
            f"no valid perf_analyzer measurement for {tag}",
            fix="raise bench.sweep.measurement_interval_ms / bench.rounds.measurement_interval_ms (the rounds') or "
            "bench.sweep.stability_percentage / bench.rounds.stability_percentage, or stop other load on the machine"
            if unstable
            else "read perf_analyzer's errors below (e.g. input names, dtypes or shapes that do not match the model config)",
            details={f"c={p.concurrency}": p.reason for p in points},
        )
