"""Model-artifact build pipeline for NVIDIA Triton."""

import signal as _signal
import sys as _sys
from collections.abc import Callable as _Callable
from types import TracebackType as _TracebackType
from typing import Any as _Any
from typing import NoReturn as _NoReturn

__version__ = "0.1.0"


def _quiet_interrupt(kind: type[BaseException], value: BaseException, tb: _TracebackType | None) -> None:
    """Ctrl-C prints one line instead of a traceback, wherever it lands (even mid-import of a stage).

    Every entry point (the DVC stages, ``python -m pipeline.params``, the CLI) imports this package first,
    so installing the hook here covers the seconds a stage spends importing onnx or torch, before its own
    handler runs. Other exceptions go to the previous hook unchanged; the interpreter still exits with the
    SIGINT status, so DVC sees an interrupted command.
    """
    if issubclass(kind, KeyboardInterrupt):
        print("\ninterrupted", file=_sys.stderr)
        return
    if _sigint_seen:
        # The Ctrl-C landed inside an extension module's import (numpy turns it into an ImportError): still an
        # interruption, not a bug to show; exit with the status of one.
        _exit_interrupted()
    _previous_hook(kind, value, tb)


_sigint_seen = False


def _exit_interrupted() -> _NoReturn:
    """Say "interrupted" and exit now with the status of an interrupted command (130), running nothing more."""
    print("\ninterrupted", file=_sys.stderr)
    _sys.stderr.flush()
    _sys.stdout.flush()
    import os

    os._exit(130)


def _note_sigint(signum: int, frame: object) -> None:
    """Python's own Ctrl-C behaviour (raise KeyboardInterrupt), remembering that it happened."""
    global _sigint_seen
    _sigint_seen = True
    raise KeyboardInterrupt


def _quiet_unraisable(unraisable: _Any) -> None:
    """A Ctrl-C that lands in a callback Python cannot raise from (an import lock's, a weakref's) is still an
    interruption: exit as the excepthook does, rather than print "Exception ignored" and carry on."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _exit_interrupted()
    _previous_unraisable(unraisable)


_previous_unraisable = _sys.unraisablehook
_previous_hook = _sys.excepthook
if _sys.excepthook is _sys.__excepthook__:
    _sys.unraisablehook = _quiet_unraisable  # leave a debugger's or another tool's hook alone
    _sys.excepthook = _quiet_interrupt
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _note_sigint)


def exit_with(main: _Callable[[], int | None]) -> _NoReturn:
    """Run an entry point's ``main`` and exit with its code; a Ctrl-C after ``main`` has returned is ignored.

    Python restores the default SIGINT action while it shuts down, so a Ctrl-C that lands once the work is
    done would kill the process with the SIGINT status and no message (a finished run reported as
    interrupted), or raise inside the interpreter's own shutdown code. The outputs are written by then.
    """
    try:
        code = main()
    finally:
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    raise SystemExit(code)
