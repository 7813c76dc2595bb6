"""An open-loop client that keeps sending through failures and counts them: rejected, timed out, other.

perf_analyzer stops at the first failed request (a worker's error status ends the run), so it cannot say what
a bounded queue does under overload: how many requests it turns away, how fast, and whether the rest still
come back in time. This client sends on a fixed schedule over gRPC (``async_infer`` with a callback: sending
never waits for a response), whatever came back, and records every request's outcome and latency.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from pipeline.serving.client import infer_inputs

Feed = dict[str, np.ndarray]
REJECTED = "Exceeds maximum queue size"  # Triton's message for a request its full queue turned away


@dataclass
class OpenLoopRun:
    """What came back: latencies (ms) of successes and of rejections, counts of timeouts and other errors."""

    offered_rate: float
    seconds: float  # from the first send to the last one
    sent: int
    ok_ms: list[float] = field(default_factory=list)
    rejected_ms: list[float] = field(default_factory=list)
    timeouts: int = 0
    errors: int = 0
    error_sample: str = ""
    unanswered: int = 0  # no callback by the end of the wait

    @property
    def achieved_rate(self) -> float | None:
        """Successful responses per second of sending."""
        return len(self.ok_ms) / self.seconds if self.seconds else None


def open_loop(grpc_url: str, model: str, rows: list[Feed], intervals_s: list[float], timeout_s: float = 10.0) -> OpenLoopRun:
    """Send one request after each gap of ``intervals_s`` (the first at once), rows in turn; wait for the answers.

    A request Triton rejects comes back with :data:`REJECTED`; one without an answer within ``timeout_s`` is a timeout.
    """
    import tritonclient.grpc as grpcclient

    inputs = [infer_inputs(r, "grpc") for r in rows]
    run = OpenLoopRun(len(intervals_s) / sum(intervals_s) if sum(intervals_s) else 0.0, 0.0, 0)
    lock, done = threading.Lock(), threading.Semaphore(0)

    def answered(start: float, result: object, error: object) -> None:
        ms = (time.perf_counter() - start) * 1000
        with lock:
            if error is None:
                run.ok_ms.append(ms)
            elif REJECTED in str(error):
                run.rejected_ms.append(ms)
            elif "deadline" in str(error).lower():
                run.timeouts += 1
            else:
                run.errors += 1
                run.error_sample = run.error_sample or str(error)[:300]
        done.release()

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        t0 = due = time.perf_counter()
        for i, gap in enumerate(intervals_s):
            due += gap if i else 0.0
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            start = time.perf_counter()
            client.async_infer(model, inputs[i % len(inputs)], callback=lambda result, error, s=start: answered(s, result, error), client_timeout=timeout_s)
            run.sent += 1
        run.seconds = time.perf_counter() - t0
        deadline = time.monotonic() + timeout_s + 2.0
        got = 0
        while got < run.sent and done.acquire(timeout=max(0.0, deadline - time.monotonic())):
            got += 1
        run.unanswered = run.sent - got
    finally:
        client.close()
    return run
