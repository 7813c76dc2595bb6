"""ONNX Runtime timed in this process on the shipped file, inputs and thread counts: the reference.

The baseline (batch-1 latency percentiles, best-batch throughput) and the gauges that paired
rounds and tuning time around each served run (:class:`Gauges`) both come from here.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from pipeline.bench.measure.results import Throughput
from pipeline.stats.ort import Feed, Latency, OrtSettings, ort_session, percentiles, same_shape_batches, time_runs


def baseline_latency(onnx_path: Path, s: OrtSettings, rows: list[Feed], warmup: int, runs: int) -> Latency:
    """Batch-1 latency in process, in a fresh session with the served settings."""
    return percentiles(time_runs(ort_session(onnx_path, s), rows, warmup, runs), s)


WARM_S = 0.5  # past 3 untimed runs, warming stops after this long: a model at 200 ms a batch is warm after 3 (20 took 4 s per gauge)


def _warm(sess: Any, batches: list[Feed]) -> None:  # sess: an onnxruntime InferenceSession (imported lazily)
    """A few untimed runs: a fresh session's first runs at a new shape grow its arena (3, up to 20 per batch item or WARM_S)."""
    b = next(iter(batches[0].values())).shape[0]
    t0 = time.perf_counter()
    for i in range(max(3, 20 // b)):
        if i >= 3 and time.perf_counter() - t0 > WARM_S:
            break
        sess.run(None, batches[i % len(batches)])


def _run_for(sess: Any, batches: list[Feed], seconds: float) -> tuple[int, float]:
    """Back-to-back ``sess.run`` over ``batches`` for ``seconds``: (inferences, elapsed s)."""
    b = next(iter(batches[0].values())).shape[0]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, batches[n % len(batches)])
        n += 1
    return n * b, time.perf_counter() - t0


def infer_per_s(sess: Any, batches: list[Feed], seconds: float) -> float:
    """Inferences/s of back-to-back ``sess.run`` over ``batches`` for ``seconds``, after a few untimed runs."""
    _warm(sess, batches)
    n, dt = _run_for(sess, batches, seconds)
    return n / dt


def baseline_throughput(onnx_path: Path, s: OrtSettings, rows: list[Feed], batch_sizes: list[int], seconds: float = 2.0, slices: int = 4) -> Throughput:
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
    return Throughput({b: n / dt for b, (n, dt) in done.items()}, s)


class Gauges:
    """In-process ORT timed around served runs: batch-1 p50 (the c=1 rounds) and best-batch infer/s (the rest).

    Each opens its session on first use, with the served variant's settings: a run with neither
    pairing nor tuning never needs them.
    """

    def __init__(
        self, onnx_paths: tuple[Path, Path], latency: OrtSettings, throughput: OrtSettings, rows: list[Feed], best_batch: int, warmup: int, runs: int, seconds: float
    ) -> None:
        lat_onnx, thr_onnx = onnx_paths  # each variant's own file (they may serve different precisions)
        self._lat = functools.cache(lambda: ort_session(lat_onnx, latency))
        self._thr = functools.cache(lambda: ort_session(thr_onnx, throughput))
        self._rows, self._batches = rows, same_shape_batches(rows, best_batch)
        self._warmup, self._runs, self._seconds = warmup, runs, seconds
        self._warm_lat = False

    def p50_ms(self) -> float:
        """Batch-1 p50 (ms) with the latency variant's settings, as in the baseline."""
        return percentiles(time_runs(self._lat(), self._rows, self._warmup, self._runs)).p50_ms

    def burst_p50_ms(self, seconds: float, warm: int = 3, least: int = 3) -> float:
        """Batch-1 p50 (ms) of back-to-back runs for ``seconds`` (at least ``least``) after ``warm`` untimed ones:
        the in-process burst of an alternation."""
        sess = self._lat()
        # A fresh session warms fully once; after that a few untimed runs per burst absorb the switch from the
        # server (see inserver.WARM_RUNS, the same count on the server's side).
        time_runs(sess, self._rows, self._warmup if not self._warm_lat else warm, 0)
        self._warm_lat = True
        times: list[float] = []
        t0 = time.perf_counter()
        while len(times) < least or time.perf_counter() - t0 < seconds:
            t = time.perf_counter()
            sess.run(None, self._rows[len(times) % len(self._rows)])
            times.append(time.perf_counter() - t)
        return percentiles(times).p50_ms

    def best_infer_s(self) -> float:
        """Inferences/s at the baseline's best batch size with the throughput variant's settings."""
        return infer_per_s(self._thr(), self._batches, self._seconds)
