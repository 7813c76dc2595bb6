"""The I/O contract: every artifact takes and returns what the reference does (names, dtypes, ranks).

Values can match while the contract breaks: an FP16 file whose output turned FLOAT16 passes an elementwise check, and
its clients (or a recurrent model's state handed back) break. So each artifact's declared graph inputs and outputs,
and the arrays it actually returned, are held against the reference's. The one change a precision may promise is
``precision.keep_io_types: false`` for the fp16 artifact: FLOAT16 in place of FLOAT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.core.specs import IOSpec

PROMISE_KEY = "precision.keep_io_types"


@dataclass(frozen=True)
class Contract:
    """A model's inputs and outputs as ``{name: (dtype name, rank)}`` (rank None: unknown)."""

    inputs: dict[str, tuple[str, int | None]]
    outputs: dict[str, tuple[str, int | None]]

    @classmethod
    def of(cls, inputs: Sequence[IOSpec], outputs: Sequence[IOSpec]) -> Contract:
        return cls({s.name: (s.dtype, len(s.dims)) for s in inputs}, {s.name: (s.dtype, len(s.dims)) for s in outputs})

    @classmethod
    def observed(cls, feeds: Sequence[Mapping[str, np.ndarray]], results: Sequence[Mapping[str, np.ndarray]]) -> Contract:
        """What a runner was given and returned on the first sample (every sample has the same names and dtypes)."""

        def io(d: Mapping[str, np.ndarray]) -> dict[str, tuple[str, int | None]]:
            return {k: (np.asarray(v).dtype.name, np.ndim(v)) for k, v in d.items()}

        return cls(io(feeds[0]) if feeds else {}, io(results[0]) if results else {})

    def to_json(self) -> dict:
        return {side: {k: {"dtype": d, "rank": r} for k, (d, r) in getattr(self, side).items()} for side in ("inputs", "outputs")}


def _allowed(ref_dtype: str, art_dtype: str, float16_io: bool) -> bool:
    return art_dtype == ref_dtype or (float16_io and ref_dtype == "float32" and art_dtype == "float16")


def problems(reference: Contract, artifact: Contract, float16_io: bool = False, what: str = "declares") -> dict[str, list[str]]:
    """``{"<side> <name>": [problem, ...]}`` where ``artifact`` breaks ``reference``; empty when it keeps it.

    ``float16_io``: the configuration promises FLOAT16 where the reference has FLOAT (fp16, keep_io_types false).
    """
    out: dict[str, list[str]] = {}
    promise = f"{PROMISE_KEY}=false promises float16 for float32" if float16_io else f"{PROMISE_KEY} promises the reference's dtypes"
    for side in ("inputs", "outputs"):
        ref, art = getattr(reference, side), getattr(artifact, side)
        label = side[:-1]
        for name in ref.keys() - art.keys():
            out.setdefault(f"{label} {name}", []).append(f"missing: the reference has {label} '{name}', the artifact {what} {sorted(art)}")
        for name in art.keys() - ref.keys():
            out.setdefault(f"{label} {name}", []).append(f"extra: the artifact {what} {label} '{name}', the reference has {sorted(ref)}")
        for name in ref.keys() & art.keys():
            (rd, rr), (ad, ar) = ref[name], art[name]
            if not _allowed(rd, ad, float16_io):
                out.setdefault(f"{label} {name}", []).append(f"dtype: the artifact {what} {ad}, the reference {rd} ({promise})")
            if rr is not None and ar is not None and rr != ar:
                out.setdefault(f"{label} {name}", []).append(f"rank: the artifact {what} {ar} dims, the reference {rr}")
    return out
