"""The promotion history of an environment, replayed: the live stack, each version's variant, unflipped intents.

``history/<env>/<model>.json`` is a list of events. Each switch appends one and rewrites the whole list, so the
events are kept as the JSON objects they are (a key an older writer wrote survives the rewrite); :class:`HistoryEvent`
names the keys this code writes and reads.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import hashlib
from typing import TypedDict


class HistoryEvent(TypedDict, total=False):
    """One promote or rollback of an environment, as ``history/<env>/<model>.json`` holds it."""

    action: str  # promote | rollback
    version: int
    previous: int | None
    variant: str
    at: str  # ISO 8601, UTC
    by: str
    reload: str | None  # the servers switched live, comma-separated
    rolled_back: int  # rollback: the version that was live
    canary: str  # a canary's promotion: the canary's id
    note: str
    pointer_sha256: str  # sha256 of the pointer the switch was about to write (the intent's proof)
    aborted: bool  # the intent's flip never came
    aborted_why: str


def now() -> str:
    """The time an event records: UTC, ISO 8601, to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def user() -> str:
    """Who an event or a lock names (``unknown`` when the OS cannot say)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def live_stack(history: list[HistoryEvent]) -> list[int]:
    """Replay promote/rollback events into the stack of live versions (top = live)."""
    stack: list[int] = []
    for e in history:
        if e.get("aborted"):
            continue
        if e.get("action") == "promote" and (not stack or stack[-1] != e["version"]):
            stack.append(int(e["version"]))
        elif e.get("action") == "rollback" and stack:
            stack.pop()
    return stack


def variant_of(history: list[HistoryEvent], version: int) -> str | None:
    """The config variant ``version`` was last promoted with (None = the release's default)."""
    for e in reversed(history):
        if e.get("version") == version and e.get("action") == "promote" and not e.get("aborted"):
            v = e.get("variant")
            return None if v in (None, "default") else v
    return None


def reconcile(history: list[HistoryEvent], pointer_bytes: bytes | None, live: int | None) -> tuple[list[HistoryEvent], HistoryEvent | None]:
    """The history as it happened: an intent whose flip never came is marked aborted (and returned).

    A switch records its event (with the sha256 of the pointer it is about to write) before it flips the
    pointer, so a kill or an error between the two leaves an intent the pointer does not match. A pointer
    that names the intent's version is taken as flipped even if its bytes differ: a hand edit after the
    flip, which ``verify`` reports against the config the release renders.
    """
    if not history or "pointer_sha256" not in history[-1] or history[-1].get("aborted"):
        return history, None
    last = history[-1]
    flipped = pointer_bytes is not None and hashlib.sha256(pointer_bytes).hexdigest() == last["pointer_sha256"]
    if flipped or live == last.get("version"):
        return history, None
    aborted: HistoryEvent = {**last, "aborted": True, "aborted_why": "recorded, but the pointer was never flipped (killed or failed before the flip)"}
    return history[:-1] + [aborted], aborted
