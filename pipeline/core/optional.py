"""Optional artifacts: a precision no fleet target serves is built best effort, and its failure blocks nothing.

``fp16_in_fleet`` / ``int8_in_fleet`` (derived from the fleet) say whether a target serves the precision, or auto
may choose it. Where one does, its stages keep their hard errors. Where none does, the stage still tries (parity
reports the quality the user could have), but a failure of the conversion is recorded instead of raised:

- the stage's output file is a small JSON *marker* (``{"pipeline_unavailable": {...}}``) in place of the ONNX
  or calibration file, so DVC has its out, and anything that reads it as ONNX fails loudly instead of serving it;
- its report says ``status: unavailable`` with the reason, and its metrics say so too;
- readers ask :func:`reason` first: parity records the artifact as skipped ("not available: ..."), choose never
  takes it, a release lists it under ``not_shipped``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.core import atomic
from pipeline.core.errors import PipelineError

KEY = "pipeline_unavailable"
_MAGIC = b'{"' + KEY.encode() + b'"'


def write(path: Path, artifact: str, reason: str) -> None:
    """Write the marker that stands for ``artifact`` at ``path`` (atomically, like the artifact would be)."""
    atomic.write_text(path, json.dumps({KEY: {"artifact": artifact, "reason": reason}}) + "\n")  # compact: the key comes first


def reason(path: Path | str | None) -> str | None:
    """Why the artifact at ``path`` is not available (None: it is a real file, or there is no file).

    Reads the first bytes only, so a multi-GB ONNX file costs nothing here.
    """
    p = Path(path) if path is not None else None
    if p is None or not p.is_file():
        return None
    with p.open("rb") as f:
        if f.read(len(_MAGIC)) != _MAGIC:
            return None
    try:
        return str(json.loads(p.read_text(encoding="utf-8"))[KEY]["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return "marked unavailable (unreadable marker)"


def require(path: Path, what: str) -> None:
    """Raise when an input of a stage is itself a marker (its producer was best effort and failed).

    Raises:
        PipelineError: naming the input and the reason it is not available.
    """
    why = reason(path)
    if why is not None:
        raise PipelineError(f"{what} is not available: {why}", fix="see the stage that wrote it", details={"file": path})


@contextlib.contextmanager
def best_effort(stage: str, artifact: str, args: argparse.Namespace, served: bool, flag: str) -> Iterator[None]:
    """Run the block; when ``served`` is false, a PipelineError becomes a recorded "not available", not a failure.

    On that path the marker goes to ``args.out``, the report (and metrics) say ``status: unavailable``, and one
    line says why; the stage then exits 0. ``flag`` names the derived key in play (``fp16_in_fleet``).
    """
    try:
        yield
    except PipelineError as e:
        if served:
            raise
        why = f"{e.what}" + (f" (fix: {e.fix})" if e.fix else "")
        write(args.out, artifact, why)
        report: dict[str, Any] = {
            "status": "unavailable",
            "artifact": artifact,
            "reason": why,
            "optional": f"{flag}=false: no target of the fleet serves it",
            "details": {k: str(v) for k, v in e.details.items()},
        }
        atomic.write_json(args.report, report)
        if getattr(args, "metrics", None) is not None:
            atomic.write_json(args.metrics, {"status": "unavailable"})
        print(f"[{stage}] {artifact} not available ({flag}=false, so this blocks nothing): {why}")
