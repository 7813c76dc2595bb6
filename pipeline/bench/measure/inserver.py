"""Short bursts of batch-1 requests to an embedded server, timed by the server's own clock inside ONNX Runtime.

The c=1 rounds alternate these bursts with in-process ones (pairing.alternations) to tell whether ORT
runs as fast inside the server as in this process. Only the server's time inside ORT counts here, so
the client sending the requests (Python, not perf_analyzer) adds nothing to the number.
"""

from __future__ import annotations

import time

from pipeline.bench.measure.inputs import http_inputs

from pipeline.stats.ort import Feed
from pipeline.bench.measure.servers import Target
from pipeline.bench.measure.sweep import flush_standin, model_stats, standin_counters, standin_split
from pipeline.serving.client import TritonClient


# Untimed runs at the start of each burst, on both sides. Right after a switch between the server and in-process
# ORT the first runs pay for the other side (its intra-op threads still spinning, caches cold), and the server's
# side is a mean, which those runs pull up: measured on MiniLM, 2 cores, an idle machine, 150 ms bursts, the
# in-server/in-process factor read 1.05-1.10 without them and 1.00 with three.
WARM_RUNS = 3


class InServerOrt:
    """``burst()``: requests for ``burst_s`` seconds, one at a time, after WARM_RUNS untimed ones; the server's
    mean ms inside ORT per timed request.

    Native stand-in: Triton's compute_infer from its statistics API (pipeline_ort times exactly its
    ORT Run call). Python stand-in: its own ORT timer from /metrics, flushed by one more request.
    """

    def __init__(self, target: Target, rows: list[Feed], burst_s: float) -> None:
        self._t, self._rows, self._burst_s = target, rows, burst_s
        self._client = TritonClient(target.http_url)  # embedded servers always have HTTP
        self._inputs = [http_inputs(row) for row in rows]
        self._next = 0

    def _send_for(self, seconds: float, least: int = 3) -> int:
        """Requests one after another for ``seconds`` (at least ``least``); how many succeeded."""
        from tritonclient.utils import InferenceServerException

        sent, t0 = 0, time.perf_counter()
        while sent < least or time.perf_counter() - t0 < seconds:
            try:
                self._client.raw.infer(self._t.model, self._inputs[self._next % len(self._inputs)])
            except (InferenceServerException, OSError):
                return sent
            self._next += 1
            sent += 1
        return sent

    def burst(self) -> float | None:
        """One burst's mean ms inside ORT per request (None: a request failed or the server's counters are missing)."""
        if self._send_for(0.0, least=WARM_RUNS) < WARM_RUNS:
            return None
        if self._t.standin_timers:  # the python stand-in publishes its own timers on /metrics, once flushed
            if not flush_standin(self._client, self._t.model, self._rows[0]):
                return None
            before = standin_counters(self._t.metrics_url, self._t.model)
            sent = self._send_for(self._burst_s)
            if not flush_standin(self._client, self._t.model, self._rows[0]):
                return None
            ms = standin_split(before, standin_counters(self._t.metrics_url, self._t.model)).get("standin_ort_ms")
            return ms if sent else None
        before = model_stats(self._client, self._t.model)
        sent = self._send_for(self._burst_s)
        if not sent or "success_count" not in before:
            return None
        # pipeline_ort reports a request's statistics just after its response: wait until all of them are in.
        deadline = time.perf_counter() + 0.5
        while True:
            after = model_stats(self._client, self._t.model)
            n = after.get("success_count", 0.0) - before["success_count"]
            if n >= sent or time.perf_counter() > deadline:
                break
            time.sleep(0.002)
        return (after["compute_infer_ns"] - before["compute_infer_ns"]) / n / 1e6 if n > 0 else None

    def close(self) -> None:
        self._client.close()
