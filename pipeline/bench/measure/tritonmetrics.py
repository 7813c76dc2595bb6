"""Triton's own Prometheus metrics (/metrics) around a measured run: deltas, per-request times, the batch Triton formed.

perf_analyzer's server split comes from Triton's statistics API; /metrics is the other channel a production
deployment scrapes. Both count the same requests, so over one run they must agree: the counts exactly (both
read before and after the run), the per-request times within the drift between perf_analyzer's last windows and
the whole run. :func:`cross_check` says how far they are apart; the diagnosis turns a gap over the tolerance into
a finding. In external mode on a GPU, /metrics is also the only source of GPU utilization and memory.
"""

from __future__ import annotations

from pipeline.serving.client import metrics_text

# Counter families, per model (label "model"), by the short names the report uses.
COUNTERS = {
    "nv_inference_request_success": "success",
    "nv_inference_count": "inferences",
    "nv_inference_exec_count": "executions",
    "nv_inference_request_duration_us": "request_us",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_input_duration_us": "compute_input_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_us",
    "nv_inference_compute_output_duration_us": "compute_output_us",
}
FAILURE = "nv_inference_request_failure"  # label "reason": REJECTED, CANCELED, BACKEND, OTHER
# Gauges read after the run: pending requests of the model; server-wide CPU and GPU figures where Triton has them.
GAUGES = {
    "nv_inference_pending_request_count": "pending",
    "nv_gpu_memory_used_bytes": "gpu_memory_used_bytes",
    "nv_gpu_utilization": "gpu_utilization",
    "nv_cpu_utilization": "cpu_utilization",
}


def scrape(metrics_url: str, model: str) -> dict[str, float] | None:
    """The cumulative counters of ``model`` and the gauges now (None when /metrics is off or unreachable)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = metrics_text(metrics_url) if metrics_url else None
    if text is None:
        return None
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name, labels = s.name.removesuffix("_total"), s.labels
            per_model = labels.get("model")
            if per_model is not None and per_model != model:
                continue
            if name in COUNTERS:
                out[COUNTERS[name]] = out.get(COUNTERS[name], 0.0) + s.value
            elif name == FAILURE:
                key = f"failed_{labels.get('reason', 'OTHER').lower()}"
                out[key] = out.get(key, 0.0) + s.value
            elif name in GAUGES:
                # GPU gauges are per GPU: summed (memory) or averaged over GPUs would both be readable; sum them.
                out[GAUGES[name]] = out.get(GAUGES[name], 0.0) + s.value
    return out


def delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """Over one run: counts, failures by reason, per-request ms, the average batch, and the gauges after it ({} without both scrapes)."""
    if before is None or after is None:
        return {}
    gauges = set(GAUGES.values())
    d = {k: after[k] - before.get(k, 0.0) for k in after if k not in gauges}
    out = {k: d.get(k, 0.0) for k in ("success", "inferences", "executions")}
    out |= {k: v for k, v in d.items() if k.startswith("failed_")}
    out["failed"] = sum(v for k, v in d.items() if k.startswith("failed_"))
    n = out["success"]
    if n:
        for key in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
            out[f"{key}_ms"] = d.get(f"{key}_us", 0.0) / n / 1000
    if out["executions"]:
        out["avg_batch"] = out["inferences"] / out["executions"]
    return out | {k: after[k] for k in gauges if k in after}


# Triton's metric -> perf_analyzer's column (both per request, ms): what the cross-check compares.
PAIRS = {"queue_ms": "server_queue_ms", "compute_infer_ms": "server_compute_infer_ms"}


COMPONENT_SHARE = 0.1  # a part of the server time is judged against at least this share of the whole


def cross_check(triton: dict[str, float], perf: dict[str, float], stats_avg_batch: float | None, floor_ms: float) -> dict[str, float]:
    """How far /metrics and perf_analyzer (and the statistics API's batch) are apart over one run, as shares.

    A share is |a - b| / max(a, b), 0 where both are below ``floor_ms`` (a 20 us queue against 30 us is noise,
    not a disagreement); a part of the server time (queue, compute infer) is divided by at least COMPONENT_SHARE of
    perf_analyzer's server time, so 0.2 ms against 0.02 ms of queue in a 20 ms request is a 9% gap, not 89%.
    Server time is queue + compute input/infer/output.
    """
    if not triton.get("success") or not perf:
        return {}
    out: dict[str, float] = {}
    whole = COMPONENT_SHARE * perf.get("server_ms", 0.0)

    def share(a: float, b: float, least: float = 0.0) -> float:
        return 0.0 if max(a, b) < floor_ms else abs(a - b) / max(a, b, least)

    for mine, theirs in PAIRS.items():
        if mine in triton and theirs in perf:
            out[mine] = share(triton[mine], perf[theirs], whole)
    server = sum(triton.get(k, 0.0) for k in ("queue_ms", "compute_input_ms", "compute_infer_ms", "compute_output_ms"))
    if "server_ms" in perf:
        out["server_ms"] = share(server, perf["server_ms"])
    if stats_avg_batch and "avg_batch" in triton:
        out["avg_batch"] = abs(triton["avg_batch"] - stats_avg_batch) / max(triton["avg_batch"], stats_avg_batch)
    return out
