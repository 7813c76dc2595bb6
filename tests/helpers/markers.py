"""The markers that say what a test starts, and the record of what it did start, so the markers stay true.

A test carries ``dvc``, ``triton``, ``torchserve`` or ``s3`` when it runs that program (tests/conftest.py adds them
from the fixtures a test uses, see ``starts``; a test that starts one in its own body says so with the marker) and
``slow`` whenever it carries one of them or ``timing``. Every process a test starts is seen: its own children
through the ``subprocess.Popen`` audit event, and their children (a stage run with ``python -m`` that starts a
server) by a watcher polling /proc. tests/conftest.py fails a test that started a program without its marker.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

# The program run (or the module of `python -m`, or the script python runs) -> the marker of a test that runs it.
HEAVY = {
    "tritonserver": "triton",
    "perf_analyzer": "triton",
    "moto.server": "s3",
    "torchserve": "torchserve",
    "java": "torchserve",
    "dvc": "dvc",
}
PROCESS_MARKERS = ("dvc", "triton", "torchserve", "s3")
WHAT = {"dvc": "a DVC subprocess", "triton": "tritonserver or perf_analyzer", "torchserve": "TorchServe (a JVM)", "s3": "an S3 server (moto)"}

F = TypeVar("F", bound=Callable[..., object])


def starts(*markers: str) -> Callable[[F], F]:
    """Declare that a fixture starts ``markers``' programs: every test using it, directly or through another
    fixture, carries those markers (put it under ``@pytest.fixture``)."""
    unknown = set(markers) - set(PROCESS_MARKERS)
    if unknown:
        raise ValueError(f"unknown process markers {sorted(unknown)}: one of {PROCESS_MARKERS}")

    def mark(fn: F) -> F:
        fn.starts = markers  # type: ignore[attr-defined]
        return fn

    return mark


def heavy(args: object) -> str | None:
    """The marker of what ``args`` starts, when it is a server or DVC; None for anything else (``ldd perf_analyzer``
    or ``java -version`` only look at a tool)."""
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    if not argv or {"-version", "--version"} & set(argv):
        return None
    prog = Path(argv[0]).name
    if prog.startswith("python") and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2:
            prog = argv[2]
        elif not argv[1].startswith("-"):  # a console script through its shebang: python /venv/bin/torchserve
            prog = Path(argv[1]).name
    return HEAVY.get(prog)


class Started:
    """What the running test started: (marker, command) pairs, from the audit hook and from the /proc watcher."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._known: set[int] = set()
        self._lock = threading.Lock()
        self._watching = False

    def audit(self, event: str, args: tuple) -> None:
        """``sys.addaudithook`` callback: a process this interpreter starts."""
        if event == "subprocess.Popen" and len(args) > 1 and (marker := heavy(args[1])):
            self.seen.append((marker, _text(args[1])))

    def reset(self, watch: bool) -> None:
        """A new test begins: forget the last one's record; processes alive now belong to earlier tests (a session's
        server). ``watch``: poll descendants during this test (off while a timing test runs, so nothing competes)."""
        with self._lock:
            self.seen.clear()
            self._known = set(_descendants(os.getpid()))
            self._watching = watch

    def poll(self) -> None:
        """Record the servers among descendants started since the test began."""
        with self._lock:
            if not self._watching:
                return
            for pid in _descendants(os.getpid()):
                if pid in self._known:
                    continue
                self._known.add(pid)
                argv = _cmdline(pid)
                if argv and (marker := heavy(argv)):
                    self.seen.append((marker, _text(argv)))

    def watch(self, interval_s: float = 0.25) -> None:
        """Poll in a daemon thread for the life of the process."""

        def loop() -> None:
            while True:
                self.poll()
                time.sleep(interval_s)

        threading.Thread(target=loop, name="started-processes", daemon=True).start()

    def missing(self, has: Callable[[str], bool]) -> list[str]:
        """Lines naming what was started by a test without that program's marker (``has(marker)``)."""
        self.poll()
        return [f"{WHAT[m]} (`{cmd}`): add @pytest.mark.{m}" for m, cmd in dict(self.seen[::-1]).items() if not has(m)]


def _text(argv: object) -> str:
    return " ".join(str(a) for a in argv)[:160] if isinstance(argv, (list, tuple)) else str(argv)[:160]


def _descendants(pid: int) -> Iterator[int]:
    """Every live descendant of ``pid`` (/proc/<pid>/task/<tid>/children lists what each thread started)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return
    for task in tasks:
        try:
            kids = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for kid in kids:
            yield kid
            yield from _descendants(kid)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


STARTED = Started()
if sys.platform == "linux":
    STARTED.watch()
sys.addaudithook(STARTED.audit)
