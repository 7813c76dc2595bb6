"""How contended the CPU was while a block of code ran: the share of the machine's CPU time other work took.

Paired rounds (pipeline/stats/estimate.py) cancel a slow drift of machine speed, which hits both sides of a pair
alike; they do not cancel contention. Another process taking a core hits a run that uses ONNX Runtime's threads in
parallel far harder (the pool waits for its descheduled thread), so contention that lands on one side of a pair
reads as a speedup of the other. A timing therefore gauges each burst's contention next to its time.

The gauge reads psutil's counters: (the machine's busy CPU time - this process's own) / the machine's total CPU
time over the window, steal included (another guest held the CPU). It is not Linux's pressure stall information
(``/proc/pressure/cpu``): PSI also counts this process's own threads waiting on each other, and ONNX Runtime's
idle pools of the other sessions spin for a while after each run, so PSI reads 0.3-0.5 on a quiet machine between
two sessions' bursts. On 2 cores the counters read 0.00-0.02 quiet and about 0.4 under one busy process; they count
in 10 ms clock ticks, so windows of 100 ms and more are what they resolve.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import TracebackType

import psutil

SOURCE = "cpu_times"


@dataclass(frozen=True)
class Contention:
    """``share``: how much of the machine's CPU other work took during the window (0 quiet, 1 all); ``source``."""

    share: float
    source: str = SOURCE


def _machine_busy_total() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far. Guest time is already inside user/nice on Linux, so it
    is not added again; idle and iowait are the idle states, steal counts as busy."""
    d = psutil.cpu_times()._asdict()
    total = sum(v for k, v in d.items() if k not in ("guest", "guest_nice"))
    return total - d["idle"] - d.get("iowait", 0.0), total


def _own_cpu() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


class Gauge:
    """``with Gauge() as g: work()`` then ``g.contention``: how contended the CPU was during the block."""

    def __init__(self) -> None:
        self.contention: Contention | None = None

    def __enter__(self) -> Gauge:
        self._start, self._own = _machine_busy_total(), _own_cpu()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        (busy, total), own = _machine_busy_total(), _own_cpu()
        dt = total - self._start[1]
        share = ((busy - self._start[0]) - (own - self._own)) / dt if dt > 0 else 0.0
        self.contention = Contention(min(max(share, 0.0), 1.0))
