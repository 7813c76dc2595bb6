"""Model-artifact build pipeline for NVIDIA Triton."""

import sys as _sys

__version__ = "0.1.0"


def _quiet_interrupt(kind: type[BaseException], value: BaseException, tb: object) -> None:
    """Ctrl-C prints one line instead of a traceback, wherever it lands (even mid-import of a stage).

    Every entry point (the DVC stages, ``python -m pipeline.params``, the CLI) imports this package first,
    so installing the hook here covers the seconds a stage spends importing onnx or torch, before its own
    handler runs. Other exceptions go to the previous hook unchanged; the interpreter still exits with the
    SIGINT status, so DVC sees an interrupted command.
    """
    if issubclass(kind, KeyboardInterrupt):
        print("\ninterrupted", file=_sys.stderr)
        return
    _previous_hook(kind, value, tb)  # type: ignore[arg-type]


_previous_hook = _sys.excepthook
if _sys.excepthook is _sys.__excepthook__:  # leave a debugger's or another tool's hook alone
    _sys.excepthook = _quiet_interrupt
