"""The split of the model's real samples into the calibration set and the held-out rows the parity gate judges on.

INT8 is calibrated on samples, and its automatic fallback searches on them: a gate judged on the same samples
measures how well the quantizer fits what it saw, not how the model does on inputs it has not seen. So the data
hook's rows are split once, by one deterministic rule that the calibrate and parity stages both apply to the same
hook output, and the two parts never share a row:

    row i (0-based, the hook's rows in order, samples pooled) is held out when floor((i + 1) * h) > floor(i * h)

with ``h = int8.calibration.holdout``. The held-out rows are spread evenly over the hook's order (h = 0.5: every
other row, the odd ones), so both parts get the same mix of the hook's batch sizes, lengths and topics, which a
split into a first and a last part would not (hooks order their data). A unit is a row of the batch axis; a model
without a dynamic batch axis cannot be cut along it, so there a unit is a whole sample.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from pipeline.core.config import TensorSpec
from pipeline.core.samples import contiguous

Feed = dict[str, np.ndarray]

RULE = "row i is held out when floor((i + 1) * h) > floor(i * h), h = int8.calibration.holdout: evenly spread over the hook's order"


def batched(specs: list[TensorSpec]) -> bool:
    """Whether every input has a dynamic (named) batch axis, so samples may be cut into rows."""
    return bool(specs) and all(s.shape and not isinstance(s.shape[0], int) for s in specs)


def rows_of(feed: Feed) -> int:
    """Rows (batch entries) in one sample."""
    first = next(iter(feed.values()))
    return int(first.shape[0]) if np.ndim(first) else 1


def is_held_out(i: int, share: float) -> bool:
    """The rule: unit ``i`` goes to the held-out part (see the module docstring)."""
    return math.floor((i + 1) * share) > math.floor(i * share)


def row_digests(feeds: list[Feed], batched: bool = True) -> list[str]:
    """sha256 of each unit's content (every input's name, dtype, shape and bytes), in order."""
    out = []
    for f in feeds:
        units = [{k: np.asarray(v)[r : r + 1] for k, v in f.items()} for r in range(rows_of(f))] if batched else [f]
        for u in units:
            h = hashlib.sha256()
            for name in sorted(u):
                a = contiguous(u[name])
                h.update(f"{name}|{a.dtype.str}|{a.shape[1:] if batched else a.shape}|".encode())
                h.update(a.tobytes())
            out.append(h.hexdigest())
    return out


def digest(feeds: list[Feed], batched: bool = True) -> str:
    """sha256 of a part: its units' digests in order (the same rows give the same digest however they are grouped into samples)."""
    return hashlib.sha256("\n".join(row_digests(feeds, batched)).encode()).hexdigest()


@dataclass(frozen=True)
class Part:
    """One side of the split: its samples (cut from the hook's), and which of the hook's units they are."""

    feeds: list[Feed]
    units: list[int]  # indices into the hook's units (rows, or samples without a batch axis), in order
    batched: bool

    @property
    def rows(self) -> int:
        return sum(rows_of(f) for f in self.feeds)

    def record(self) -> dict[str, object]:
        """What a report says about it: rows, samples, the hook's unit indices and the content digest."""
        return {"rows": self.rows, "samples": len(self.feeds), "units": list(self.units), "sha256": digest(self.feeds, self.batched)}


@dataclass(frozen=True)
class Split:
    calibration: Part
    holdout: Part
    share: float

    def record(self) -> dict[str, object]:
        return {
            "rule": RULE,
            "holdout": self.share,
            "unit": "row" if self.holdout.batched else "sample",
            "calibration": self.calibration.record(),
            "held_out": self.holdout.record(),
        }


def split(feeds: list[Feed], share: float, batched: bool = True) -> Split:
    """Cut ``feeds`` into the calibration part and the held-out part by :func:`is_held_out`, keeping the hook's order
    and batches (a sample whose rows go to both parts is cut in two, each keeping the sample's padded shape)."""
    parts: dict[bool, tuple[list[Feed], list[int]]] = {False: ([], []), True: ([], [])}
    i = 0
    for f in feeds:
        n = rows_of(f) if batched else 1
        sides = [is_held_out(i + r, share) for r in range(n)]
        for side in (False, True):
            idx = [r for r in range(n) if sides[r] == side]
            if not idx:
                continue
            parts[side][0].append(f if len(idx) == n else {k: np.asarray(v)[idx] for k, v in f.items()})
            parts[side][1].extend(i + r for r in idx)
        i += n
    return Split(Part(*parts[False], batched), Part(*parts[True], batched), share)
