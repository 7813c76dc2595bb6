"""Measurements for the bench stage: request rows, the in-process ORT baseline, perf sweeps.

Every number the report shows comes from here: perf_analyzer against a live server
(client p50/p95/p99, throughput, server queue/compute split) plus Triton's own
statistics API (inference_count / execution_count = average batch actually formed),
and ONNX Runtime timed in this process on the same file, inputs and thread counts.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.serving import perf_analyzer as pa_mod
from pipeline.repository import config as triton_config
from pipeline.serving.embedded import STANDIN_FLUSH_S
from pipeline.core.config import BenchConfig
from pipeline.core.errors import BenchError

Feed = dict[str, np.ndarray]



# ---------------------------------------------------------------- request rows
def request_rows(samples: list[Feed], batched: bool) -> list[Feed]:
    """Split sample feeds into the batch-1 requests a client sends (one row each)."""
    if not batched:
        return [dict(f) for f in samples]
    rows: list[Feed] = []
    for feed in samples:
        n = next(iter(feed.values())).shape[0]
        rows += [{k: np.asarray(v)[i : i + 1] for k, v in feed.items()} for i in range(n)]
    return rows


def shape_key(feed: Feed) -> tuple:
    """Identity of a request's shapes; Triton batches only requests with equal shapes."""
    return tuple((k, v.shape[1:]) for k, v in sorted(feed.items()))


def uniform_rows(rows: list[Feed]) -> list[Feed]:
    """The largest group of rows sharing one shape (what a client padding to one length sends)."""
    groups: dict[tuple, list[Feed]] = {}
    for r in rows:
        groups.setdefault(shape_key(r), []).append(r)
    return max(groups.values(), key=len)


# ---------------------------------------------------------------- ORT baseline
@dataclass
class OrtSettings:
    """The ONNX Runtime settings a Triton config implies."""

    intra_op_threads: int
    inter_op_threads: int
    graph_level: int

    @classmethod
    def from_config(cls, cfg: mc.ModelConfig) -> OrtSettings:
        p = cfg.parameters
        intra = int(p["intra_op_thread_count"].string_value or 0) if "intra_op_thread_count" in p else 0
        inter = int(p["inter_op_thread_count"].string_value or 0) if "inter_op_thread_count" in p else 0
        level = cfg.optimization.graph.level if cfg.HasField("optimization") else 0
        return cls(intra, inter, level)


def ort_session(onnx_path: Path, s: OrtSettings):  # noqa: ANN201 - onnxruntime type
    """An ORT CPU session with exactly the settings the served model uses."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = s.intra_op_threads
    so.inter_op_num_threads = s.inter_op_threads
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, triton_config.ORT_LEVEL_NAME.get(s.graph_level, "ORT_ENABLE_ALL"))
    return ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])


def percentiles(x: list[float]) -> dict[str, float]:
    a = np.asarray(x) * 1e3
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "mean_ms": float(a.mean()), "n": int(a.size)}


def time_runs(sess, rows: list[Feed], warmup: int, runs: int) -> list[float]:  # noqa: ANN001 - onnxruntime type
    """Seconds per batch-1 ``sess.run``: ``warmup`` untimed runs, then ``runs`` timed, cycling the rows."""
    for i in range(warmup):
        sess.run(None, rows[i % len(rows)])
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        sess.run(None, rows[i % len(rows)])
        times.append(time.perf_counter() - t0)
    return times


def baseline_latency(onnx_path: Path, s: OrtSettings, rows: list[Feed], warmup: int, runs: int) -> dict:
    """Batch-1 latency in process, in a fresh session with the served settings."""
    return {**percentiles(time_runs(ort_session(onnx_path, s), rows, warmup, runs)), "settings": asdict(s)}


def same_shape_batches(rows: list[Feed], b: int) -> list[Feed]:
    """One batch of ``b`` rows per input shape, tiling each same-shape group (Triton batches only equal shapes)."""
    groups: dict[tuple, list[Feed]] = {}
    for r in rows:
        groups.setdefault(shape_key(r), []).append(r)
    out = []
    for g in groups.values():
        picks = [g[i % len(g)] for i in range(b)]
        out.append({k: np.concatenate([p[k] for p in picks]) for k in picks[0]})
    return out


def _warm(sess, batches: list[Feed]) -> None:  # noqa: ANN001 - onnxruntime type
    """A few untimed runs: a fresh session's first runs at a new shape grow its arena."""
    b = next(iter(batches[0].values())).shape[0]
    for i in range(max(3, 20 // b)):
        sess.run(None, batches[i % len(batches)])


def _run_for(sess, batches: list[Feed], seconds: float) -> tuple[int, float]:  # noqa: ANN001 - onnxruntime type
    """Back-to-back ``sess.run`` over ``batches`` for ``seconds``: (inferences, elapsed s)."""
    b = next(iter(batches[0].values())).shape[0]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, batches[n % len(batches)])
        n += 1
    return n * b, time.perf_counter() - t0


def infer_per_s(sess, batches: list[Feed], seconds: float) -> float:  # noqa: ANN001 - onnxruntime type
    """Inferences/s of back-to-back ``sess.run`` over ``batches`` for ``seconds``, after a few untimed runs."""
    _warm(sess, batches)
    n, dt = _run_for(sess, batches, seconds)
    return n / dt


def baseline_throughput(
    onnx_path: Path, s: OrtSettings, rows: list[Feed], batch_sizes: list[int], seconds: float = 2.0, slices: int = 4
) -> dict:
    """Inferences/s in process for each batch size; batches are built from same-shape rows.

    Each batch size gets ``seconds`` in ``slices`` interleaved slices: this machine's speed
    flips within seconds, and back-to-back blocks would let it pick the "best" batch size.
    """
    sess = ort_session(onnx_path, s)
    batches = {b: same_shape_batches(rows, b) for b in batch_sizes}
    for b in batch_sizes:
        _warm(sess, batches[b])
    done = {b: [0, 0.0] for b in batch_sizes}
    for _ in range(slices):
        for b in batch_sizes:
            n, dt = _run_for(sess, batches[b], seconds / slices)
            done[b][0] += n
            done[b][1] += dt
    per_batch = {str(b): n / dt for b, (n, dt) in done.items()}
    best = max(per_batch, key=per_batch.__getitem__)
    return {"per_batch_infer_s": per_batch, "best_batch": int(best), "best_infer_s": per_batch[best], "settings": asdict(s)}


# ---------------------------------------------------------------- server statistics
def model_stats(http_url: str, model: str) -> dict[str, float]:
    """Cumulative counters from Triton's statistics API (inference and execution counts, ns)."""
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2/models/{model}/stats", timeout=10) as r:  # noqa: S310
            data = json.load(r)
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    st = data["model_stats"][0]
    inf = st["inference_stats"]
    return {
        "inference_count": float(st.get("inference_count", 0)),
        "execution_count": float(st.get("execution_count", 0)),
        "success_count": float(inf["success"]["count"]),
        "fail_count": float(inf["fail"]["count"]),
        "queue_ns": float(inf["queue"]["ns"]),
    }


STANDIN_COUNTERS = {
    "pipeline_standin_ort_run_ns": "ort_ns",
    "pipeline_standin_execute_ns": "execute_ns",
    "pipeline_standin_executions": "executions",
}


def standin_counters(metrics_url: str, model: str) -> dict[str, float]:
    """The embedded stand-in's cumulative timers from Triton's /metrics (empty if absent or unreachable)."""
    from prometheus_client.parser import text_string_to_metric_families

    if not metrics_url:
        return {}
    try:
        with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10) as r:  # noqa: S310 - loopback
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            key = STANDIN_COUNTERS.get(sample.name.removesuffix("_total"))
            if key and sample.labels.get("model") == model:
                out[key] = out.get(key, 0.0) + sample.value  # summed over instances
    return out


def flush_standin(http_url: str, model: str, row: Feed) -> bool:
    """Make the stand-in publish every execution so far: one request after its flush interval.

    The stand-in flushes its timers from inside ``execute`` once ``STANDIN_FLUSH_S`` has
    passed, so a request sent that long after a run flushes everything up to and including
    itself. Returns False if the request failed (the counters are then not lined up).
    """
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    time.sleep(STANDIN_FLUSH_S + 0.05)
    inputs = []
    for name, arr in row.items():
        inp = httpclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        inp.set_data_from_numpy(arr)
        inputs.append(inp)
    try:
        httpclient.InferenceServerClient(http_url).infer(model, inputs)
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


# ---------------------------------------------------------------- perf sweeps
@dataclass
class Point:
    """One concurrency level of one variant."""

    concurrency: int
    valid: bool
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    avg_batch: float | None = None
    failed_requests: float = 0.0


def sweep(
    pa: pa_mod.PerfAnalyzer,
    bench: BenchConfig,
    model: str,
    http_url: str,
    perf_url: str,
    input_json: Path,
    shapes: dict[str, list[int]],
    concurrency: list[int],
    work_dir: Path,
    tag: str,
    interval_ms: int | None = None,
    metrics_url: str = "",
    probe_row: Feed | None = None,
) -> list[Point]:
    """perf_analyzer at each concurrency; unstable or failed runs are kept as invalid points.

    ``interval_ms`` overrides bench.measurement_interval_ms (the paired c=1 rounds use short windows).
    With ``metrics_url`` and ``probe_row`` (embedded server), each point also gets the stand-in's
    split of compute time, its counters lined up with the run by :func:`flush_standin`.
    """
    points = []
    timed = bool(metrics_url and probe_row)
    for c in concurrency:
        csv_path = work_dir / f"{tag}_c{c}.csv"
        cmd = pa_mod.build_command(
            pa, model, perf_url, c, input_json, csv_path,
            protocol=bench.protocol,
            measurement_interval_ms=interval_ms or bench.measurement_interval_ms,
            stability_percentage=bench.stability_percentage,
            max_trials=bench.max_trials,
            shapes=shapes,
        )  # fmt: skip
        # Counters were flushed after the previous run (or nothing ran yet): nothing is pending now.
        before, t_before = model_stats(http_url, model), standin_counters(metrics_url, model) if timed else {}
        run = pa_mod.run(pa, cmd, c, csv_path, timeout_s=bench.perf_timeout_s)
        after = model_stats(http_url, model)  # before the flush request, so Triton's counts are perf_analyzer's only
        t_after = standin_counters(metrics_url, model) if timed and flush_standin(http_url, model, probe_row) else {}
        (work_dir / f"{tag}_c{c}.log").write_text(" ".join(cmd) + "\n\n" + run.log)
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        avg_batch = delta["inference_count"] / delta["execution_count"] if delta.get("execution_count") else None
        failed = delta.get("fail_count", 0.0)
        valid, reason = run.valid, run.reason()
        if valid and failed:
            valid, reason = False, f"{failed:.0f} requests failed on the server"
        # The 1-minute load average after the run: on a shared machine it tells which points others disturbed.
        metrics = dict(run.row, loadavg_1m=round(os.getloadavg()[0], 2), **standin_split(t_before, t_after)) if valid else {}
        points.append(Point(c, valid, reason, metrics, avg_batch, failed))
        status = f"p50 {run.row['p50_ms']:.2f} ms, {run.row['throughput_infer_s']:.1f} infer/s" if valid else f"INVALID ({reason})"
        print(f"[bench] {tag} c={c}: {status}", flush=True)
    return points


def bracketed_rounds(
    steps: Callable[[int], list[Callable[[], dict]]],
    ratio: Callable[[dict, float], float | None],
    gauge: Callable[[], float],
    gauge_key: str,
    want: int,
    max_rounds: int,
    max_drift: float,
    inside: Callable[[dict], float | None] | None = None,
) -> dict:
    """Rounds of [gauge, step, gauge, step, ..., gauge]; the median ratio over the rounds that count.

    This machine's speed drifts by tens of percent within a minute (a shared VM; it flips
    between a fast and a slow state every few seconds), so two numbers taken apart can make
    a ratio say anything. Each of a round's ``steps(round)`` (served measurements) sits
    between two in-process ONNX Runtime measurements, the gauge; a round counts only if all
    its gauges agree within ``max_drift`` (the machine kept its speed for every step) and
    ``ratio(merged step results, mean gauge)`` gave a number. Rounds run until ``want``
    count or ``max_rounds`` ran. Which rounds count, and when to stop, depend only on the
    gauges and on validity, never on the ratio's value.

    The gauges around a step miss a flip that begins and ends inside it. ``inside(step
    results)``, where given, is the same ORT work timed by the server *during* the step (the
    embedded stand-in's time inside ONNX Runtime): it must agree with the gauges too.
    """
    out_rounds: list[dict] = []
    for i in range(max_rounds):
        if sum(r["counted"] for r in out_rounds) >= want:
            break
        gauges, detail = [gauge()], {}
        for step in steps(i):
            detail.update(step())
            gauges.append(gauge())
        mean = float(np.mean(gauges))
        in_server = inside(detail) if inside else None
        checked = gauges + ([in_server] if in_server else [])
        drift = (max(checked) - min(checked)) / min(checked)
        r = ratio(detail, mean)
        out_rounds.append({"round": i, f"{gauge_key}_before": gauges[0], f"{gauge_key}_after": gauges[-1], "gauges": gauges,
                           "gauge_mean": mean, "in_server_gauge": in_server, "drift": drift, **detail, "ratio": r,
                           "counted": r is not None and drift <= max_drift})  # fmt: skip
    counted = [r for r in out_rounds if r["counted"]]
    summary: dict = {"rounds": out_rounds, "max_drift": max_drift, "counted_rounds": len(counted), "gauge": gauge_key}
    if counted:
        summary["ratio"] = float(np.median([r["ratio"] for r in counted]))
        summary[gauge_key] = float(np.median([r["gauge_mean"] for r in counted]))
        summary["ratio_range"] = [min(r["ratio"] for r in counted), max(r["ratio"] for r in counted)]
    else:
        summary["ratio"] = None
        summary["reason"] = (
            f"no round kept the in-process gauge ({gauge_key}){' and the in-server ORT time' if inside else ''} within {max_drift:.0%} (drifts "
            + ", ".join(f"{r['drift']:.0%}" for r in out_rounds) + ") or a served run was invalid"
        )
    return summary


def paired_c1(
    serve_c1: Callable[[int], Point],
    ort_p50: Callable[[], float],
    want: int,
    max_rounds: int,
    max_drift: float,
    in_server_key: str | None = None,
) -> dict:
    """Served c=1 p50 against the in-process batch-1 ORT p50 measured right before and right after it.

    ``in_server_key``: the served metric that is the server's own time inside ORT per request
    (embedded mode: ``server_compute_infer_ms`` for the native stand-in, ``standin_ort_ms`` for
    the python one); a round then also needs it to agree with the gauges (see bracketed_rounds).
    """

    def steps(i: int) -> list[Callable[[], dict]]:
        def step() -> dict:
            pt = serve_c1(i)
            return {"served_valid": pt.valid, "served_reason": pt.reason, "served": dict(pt.metrics)}

        return [step]

    def ratio(d: dict, ort_ms: float) -> float | None:
        return d["served"]["p50_ms"] / ort_ms if d["served_valid"] else None

    def inside(d: dict) -> float | None:
        return d["served"].get(in_server_key) if in_server_key and d["served_valid"] else None

    summary = bracketed_rounds(steps, ratio, ort_p50, "ort_p50_ms", want, max_rounds, max_drift, inside)
    summary["in_server_gauge"] = in_server_key
    if summary["ratio"] is not None:
        summary["served_p50_ms"] = float(np.median([r["served"]["p50_ms"] for r in summary["rounds"] if r["counted"]]))
    return summary


def paired_throughput(
    serve: Callable[[str, int, int], Point],
    ort_best: Callable[[], float],
    concurrency: list[int],
    want: int,
    max_rounds: int,
    max_drift: float,
) -> dict[str, dict]:
    """Throughput variant over latency variant at each concurrency, both measured inside one bracketed round.

    ``serve(variant, concurrency, round)`` runs perf_analyzer on one variant of a server that
    holds both. A round is [gauge, one variant, gauge, the other, gauge]: a speed flip during
    either run shows in its gauges. The order alternates between rounds, so what is left of
    the machine's drift favours neither variant. The gauge is in-process ORT inferences/s at
    the baseline's best batch size, so each round also gives the throughput variant against
    in-process best-batch throughput of that minute.
    """
    out: dict[str, dict] = {}
    for c in concurrency:

        def steps(i: int, c: int = c) -> list[Callable[[], dict]]:
            order = ["latency", "throughput"] if i % 2 == 0 else ["throughput", "latency"]

            def run(v: str) -> dict:
                p = serve(v, c, i)
                return {v: {"valid": p.valid, "reason": p.reason, "avg_batch": p.avg_batch, **p.metrics}}

            return [lambda v=v: {"order": order, **run(v)} for v in order]

        def ratio(d: dict, _ort: float) -> float | None:
            lat, thr = d["latency"], d["throughput"]
            return thr["throughput_infer_s"] / lat["throughput_infer_s"] if lat["valid"] and thr["valid"] else None

        s = bracketed_rounds(steps, ratio, ort_best, "ort_best_infer_s", want, max_rounds, max_drift)
        for r in s["rounds"]:
            r["throughput_vs_ort_best"] = r["throughput"]["throughput_infer_s"] / r["gauge_mean"] if r["throughput"]["valid"] else None
            # What the throughput variant's scheduling costs a request, e.g. the batching tax at c=1.
            r["p50_delta_ms"] = r["throughput"]["p50_ms"] - r["latency"]["p50_ms"] if r["ratio"] is not None else None
        counted = [r for r in s["rounds"] if r["counted"]]
        if counted:
            for v in ("latency", "throughput"):
                s[f"{v}_infer_s"] = float(np.median([r[v]["throughput_infer_s"] for r in counted]))
            s["throughput_vs_ort_best"] = float(np.median([r["throughput_vs_ort_best"] for r in counted]))
            s["p50_delta_ms"] = float(np.median([r["p50_delta_ms"] for r in counted]))
        out[f"c{c}"] = s
    return out


def check_readiness(points: list[Point], tag: str) -> None:
    """Raise when a variant produced no valid point at all: there is nothing to report."""
    if points and not any(p.valid for p in points):
        unstable = all("stable" in p.reason for p in points)
        raise BenchError(
            f"no valid perf_analyzer measurement for {tag}",
            fix="raise bench.measurement_interval_ms or bench.stability_percentage, or stop other load on the machine"
            if unstable
            else "read perf_analyzer's errors below (e.g. input names, dtypes or shapes that do not match the model config)",
            details={f"c={p.concurrency}": p.reason for p in points},
        )


def cpu_budget() -> int:
    """Cores this process may use (affinity), which is what oversubscription is judged against."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
