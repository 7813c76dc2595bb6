"""Fault points: named places in a switch where a test makes the process die or the disk fill.

``TRITON_PIPELINE_FAULT=<point>:<kind>`` (kind ``kill``: SIGKILL this process; ``enospc``: raise the
OSError a full disk raises) fires at :func:`point` ``<point>``. Unset, a point costs one dict lookup.
Real kills at random times are tested too; these points make the narrowest windows reproducible.
"""

from __future__ import annotations

import errno
import os
import signal

ENV = "TRITON_PIPELINE_FAULT"


def point(name: str, path: str = "") -> None:
    """Fire the fault configured for ``name`` (``path``: the file a disk-full error names)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    where, _, kind = spec.partition(":")
    if where != name:
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path or None)
