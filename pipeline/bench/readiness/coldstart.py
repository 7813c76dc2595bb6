"""Cold start per variant: a fresh server, an explicit load, the first request against the warm p50 after it.

Each variant is measured in a server of its own, started with no model (explicit model control), twice when it
ships a model_warmup: as shipped, and with the warmup removed by a load-time config override, so the report shows
what warmup buys. Timed: spawn -> server ready, load request -> model ready (the load call returns when the model
is ready, warmup included), then one request and ``requests`` more by the same client, the same way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format

from pipeline.bench.measure.inputs import http_inputs
from pipeline.bench.readiness.results import ColdStart
from pipeline.bench.measure.servers import EmbeddedMode
from pipeline.bench.measure.sweep import model_stats
from pipeline.core.errors import PipelineError
from pipeline.serving.client import TritonClient
from pipeline.serving.embedded import read_config, variant_model
from pipeline.serving.process import EmbeddedServer

Feed = dict[str, np.ndarray]


def _infer_ms(raw: Any, model: str, row: Feed) -> float:
    """One request's latency (ms) over HTTP, as a client sends it (``raw``: tritonclient's HTTP client, untyped)."""
    inputs = http_inputs(row)
    t = time.perf_counter()
    raw.infer(model, inputs)
    return (time.perf_counter() - t) * 1000


def _stats_with(client: TritonClient, model: str, successes: float, wait_s: float = 1.0) -> dict[str, float]:
    """Triton's statistics once they count ``successes`` requests: a backend reports a request just after its response."""
    deadline = time.monotonic() + wait_s
    while True:
        st = model_stats(client, model)
        if st.get("success_count", 0.0) >= successes or time.monotonic() > deadline:
            return st
        time.sleep(0.002)


def measure(mode: EmbeddedMode, variant: str, warmup: bool, row: Feed, requests: int, log_dir: Path) -> ColdStart:
    """``variant`` in a fresh server: its shipped config (``warmup``) or the same without model_warmup."""
    out = ColdStart(variant, warmup)
    model = variant_model(mode.shipped.name, variant)
    cfg = read_config(mode.repo / model / "config.pbtxt")
    if not warmup:
        cfg.ClearField("model_warmup")
    logs = log_dir / f"cold_start_{variant}_{'warmup' if warmup else 'no_warmup'}"  # a server log of its own
    try:
        with (
            EmbeddedServer(mode.repo, "", timeout_s=mode.timeout_s, log_dir=logs) as srv,
            mode.sampled(srv, f"cold start {variant}" + (" (warmup)" if warmup else "")) as mem,
            srv.client() as client,
        ):
            out.server_start_s = round(srv.ready_at - srv.spawned_at, 3)
            t = time.monotonic()
            # The override is the file's own config (minus its warmup when measuring without), so both loads go one way.
            client.load(model, json_format.MessageToJson(cfg, preserving_proto_field_name=True))
            out.load_s = round(time.monotonic() - t, 3)
            time.sleep(2 * mode.memory_sample_s)
            out.rss_loaded_mb = mem.now_mb()
            client.raw.is_server_ready()  # the client's connection is open before the first request: not in its time
            s0 = model_stats(client, model)  # Triton counts the warmup's inferences in its statistics
            out.first_ms = round(_infer_ms(client.raw, model, row), 3)
            s1 = _stats_with(client, model, s0.get("success_count", 0.0) + 1)
            warm = [_infer_ms(client.raw, model, row) for _ in range(requests)]
            s2 = _stats_with(client, model, s1.get("success_count", 0.0) + len(warm))
            out.warm_p50_ms, out.requests = round(statistics.median(warm), 3), len(warm)
            out.rss_peak_mb = max((mb for _, mb in mem.samples), default=None)
            out.warmup_inferences = s0.get("inference_count", 0.0)
            out.first_server_ms = round((s1["success_ns"] - s0["success_ns"]) / 1e6, 3) if s1 and s0 else None
            out.warm_server_ms = round((s2["success_ns"] - s1["success_ns"]) / 1e6 / len(warm), 3) if s2 and s1 and warm else None
    except PipelineError as e:
        out.error = e.what
    return out


def cold_starts(mode: EmbeddedMode, variants: list[str], row: Feed, requests: int, log_dir: Path, log: Callable[[str], None]) -> list[ColdStart]:
    """Every variant without and (when it ships one) with its model_warmup, each in a fresh server."""
    out = []
    for v in variants:
        shipped = read_config(mode.repo / variant_model(mode.shipped.name, v) / "config.pbtxt")
        for warmup in (False, True) if shipped.model_warmup else (False,):
            c = measure(mode, v, warmup, row, requests, log_dir)
            out.append(c)
            tag = "with warmup" if warmup else "without warmup"
            log(
                f"[bench] cold start {v} {tag}: "
                + (
                    f"FAILED ({c.error})"
                    if c.error
                    else f"server {c.server_start_s:.2f} s + load {c.load_s:.2f} s; first request {c.first_ms:.1f} ms vs warm p50 {c.warm_p50_ms:.2f} ms"
                )
            )
    return out
