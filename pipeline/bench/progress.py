"""One live progress line for the bench: phase, point, round, elapsed and ETA.

On a terminal it is a rich live line, with each measurement's own line printed above it; elsewhere
(CI logs, DVC piped, tests) every change of phase, point or round is a plain line of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text


class Progress:
    """The bench's progress; ``phases`` are its phases in order with the seconds each is expected to take.

    A phase that knows better (the rounds, from their own durations) says so with :meth:`at`'s ``left_s``.
    """

    def __init__(self, phases: dict[str, float], console: Console | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._expected = dict(phases)
        self._console = console or Console(highlight=False)
        self._clock = clock
        self._t0 = self._phase_t0 = clock()
        self._phase, self._point, self._round = "", "", ""
        self._left: float | None = None
        self._told = self._t0
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self._console.is_terminal:
            self._live = Live(self, console=self._console, refresh_per_second=4, transient=True)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __rich__(self) -> Text:  # the live line re-renders itself, so elapsed and ETA tick between updates
        return Text(self.line(), style="bold")

    def eta_s(self) -> float:
        """Seconds left: this phase's (as told, less the time since, else as expected) and every later phase's."""
        names = list(self._expected)
        later = names[names.index(self._phase) + 1 :] if self._phase in names else names
        if self._left is not None:
            here = max(0.0, self._left - (self._clock() - self._told))
        else:
            here = max(0.0, self._expected.get(self._phase, 0.0) - (self._clock() - self._phase_t0))
        return here + sum(self._expected[n] for n in later)

    def line(self) -> str:
        where = " ".join(x for x in (self._phase, self._point, self._round) if x)
        return f"[bench] {where} | {self._clock() - self._t0:.0f} s elapsed | ETA ~{self.eta_s():.0f} s"

    def phase(self, name: str, expected_s: float | None = None) -> None:
        """Enter phase ``name`` (optionally with a better guess of its length)."""
        if expected_s is not None:
            self._expected[name] = expected_s
        self._phase, self._point, self._round, self._left = name, "", "", None
        self._phase_t0 = self._clock()
        self._changed()

    def expect(self, phases: dict[str, float]) -> None:
        """Better guesses of the later phases' lengths (e.g. once the model's latency is measured)."""
        self._expected |= {k: v for k, v in phases.items() if k != self._phase}
        self._changed()

    def at(self, point: str = "", round_: str = "", left_s: float | None = None) -> None:
        """Now measuring ``point`` (e.g. "latency c=8") in ``round_``; ``left_s``: this phase's remaining seconds."""
        self._point, self._round = point, round_
        if left_s is not None:
            self._left, self._told = left_s, self._clock()
        self._changed()

    def log(self, message: str) -> None:
        """A line of its own (above the live line on a terminal)."""
        if self._live is not None:
            self._live.console.print(message, markup=False, highlight=False)
        else:
            print(message, flush=True)

    def _changed(self) -> None:
        if self._live is not None:
            self._live.refresh()
        else:
            print(self.line(), flush=True)
