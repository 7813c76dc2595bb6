"""The server's memory over time: RSS of the tritonserver process plus its children (python-backend stubs).

A background thread samples with psutil every ``interval_s`` for the server's whole life; callers read the
samples of a window (one perf_analyzer run, the soak) afterwards, so sampling never sits inside a timed span.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import psutil

MB = 1024 * 1024
_CHILDREN_EVERY_S = 2.0  # psutil's children() scans /proc: look for new stubs this often, not every sample


@dataclass
class Window:
    """RSS over one window (MB): the peak, the median (the steady state) and the samples behind them."""

    peak_mb: float
    median_mb: float
    samples: int


class RssSampler:
    """Samples ``pid``'s RSS plus its children's (summed) every ``interval_s`` in a daemon thread, until :meth:`stop`.

    Usage::

        with RssSampler(server.proc.pid, 0.2) as mem:
            ...
            mem.window(t0, t1)  # monotonic times
    """

    def __init__(self, pid: int, interval_s: float) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.samples: list[tuple[float, float]] = []  # (time.monotonic(), MB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop sampling (safe to call twice)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        procs: list[psutil.Process] = [root]
        looked = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - looked >= _CHILDREN_EVERY_S:
                try:
                    procs = [root, *root.children(recursive=True)]
                except psutil.Error:
                    return  # the server is gone
                looked = now
            total = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    continue  # a stub that exited between two scans
            self.samples.append((now, total / MB))
            self._stop.wait(self.interval_s)

    def now_mb(self) -> float | None:
        """The latest sample (None before the first)."""
        return self.samples[-1][1] if self.samples else None

    def series(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """The samples taken in [t0, t1] (monotonic seconds)."""
        return [(t, mb) for t, mb in list(self.samples) if t0 <= t <= t1]

    def window(self, t0: float, t1: float) -> Window | None:
        """Peak and median RSS over [t0, t1]; None without a sample in it."""
        vals = sorted(mb for _, mb in self.series(t0, t1))
        if not vals:
            return None
        return Window(round(vals[-1], 2), round(vals[len(vals) // 2], 2), len(vals))
