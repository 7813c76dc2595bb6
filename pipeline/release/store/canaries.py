"""Where the store keeps canary records: ``history/<env>/<model>.canary/<id>.json``, and ``<id>.md`` beside it.

The record itself is :class:`pipeline.records.canary.CanaryRecord`; its table is rendered by
:mod:`pipeline.release.canary.report`. Ids start with the canary's UTC start time, so they sort by time.
"""

from __future__ import annotations

import json

from pipeline.records.canary import CanaryRecord
from pipeline.release.store.fs import StoreFS


def record_dir(env: str, model: str) -> str:
    return f"history/{env}/{model}.canary"


def write(fs: StoreFS, rec: CanaryRecord, table: str | None) -> str:
    """Write (or rewrite) the record's JSON, and its markdown ``table`` when given; returns the JSON's store path."""
    rel = f"{record_dir(rec.env, rec.model)}/{rec.id}"
    # default=str: a value JSON has no type for (a numpy scalar of a comparison) is written as text rather than losing the record.
    fs.write_atomic(f"{rel}.json", (json.dumps(rec.to_json(), indent=2, default=str) + "\n").encode())
    if table is not None:
        fs.write_atomic(f"{rel}.md", table.encode())
    return f"{rel}.json"


def read(fs: StoreFS, env: str, model: str, rid: str | None = None) -> CanaryRecord | None:
    """The record ``rid``, or the newest one; None when there is none (or it cannot be read)."""
    d = record_dir(env, model)
    if rid is None:
        ids = sorted(n.removesuffix(".json") for n in fs.listdir(d) if n.endswith(".json"))
        if not ids:
            return None
        rid = ids[-1]
    try:
        return CanaryRecord.from_json(json.loads(fs.read_bytes(f"{d}/{rid}.json")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
