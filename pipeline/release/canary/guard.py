"""Putting the servers back to what the pointer says, and the process that does it when a canary dies.

:func:`restore` makes every server of an environment serve exactly what the store's pointer names:
it unloads the canary's copies (models ``<model>__canary_<id>-baseline`` and ``-candidate``) and, when a switch may have been cut
short, reloads the environment's model with the pointer's config, so a version loaded beside the
live one for the switch is retired. It is idempotent; the canary calls it on its own failure or
Ctrl-C, ``release canary --abort`` calls it, and so does the guard.

The guard is a separate process the canary starts before it loads anything
(``python -m pipeline.release.canary.guard <spec>``, in its own session so a Ctrl-C aimed at the
canary does not reach it). It reads the canary's stdin pipe: ``switching`` when the promotion
starts, ``done`` once the canary has cleaned up itself. End of file without ``done`` means the
canary died without running any code (SIGKILL, OOM): the guard runs :func:`restore` and marks the
canary's record ``killed``. The same pipe trick keeps the embedded tritonserver from outliving the
bench (:mod:`pipeline.serving.process`).

Locking: a canary holds the environment's lock for its whole run. A local flock dies with its holder,
so the guard takes it again before touching the environment's model; an object store's lease
outlives a killed holder until ``release.lock_lease_s``, so nobody else can switch meanwhile and
the guard works under the dead canary's lease.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import PipelineError, ReleaseError
from pipeline.release.canary.report import write_record
from pipeline.release.store import canaries, pointer
from pipeline.release.store.history import HistoryEvent, live_stack, now
from pipeline.release.store.store import ReleaseStore
from pipeline.release.triton_control import TritonReloader

SIBLING_PREFIX = "__canary_"


def sibling_name(model: str, rid: str, side: str) -> str:
    """The name under which canary ``rid`` serves ``side`` (``baseline``: the live version; ``candidate``) beside the model.

    Names are per canary: Triton 2.51 crashed (SIGSEGV, seen twice on the tiny model) when a model was loaded
    from override files under a name whose previous copy was still being torn down, which takes a second
    or two after the unload call returns and shows in no API.
    """
    return f"{model}{SIBLING_PREFIX}{rid}-{side}"


def loaded_copies(r: TritonReloader, model: str) -> list[str]:
    """Canary copies of ``model`` loaded on the server (override-file models are in no repository index, but in the statistics)."""
    stats = r.client.model_statistics("").get("model_stats", [])
    return sorted({str(st.get("name")) for st in stats if str(st.get("name", "")).startswith(f"{model}{SIBLING_PREFIX}")})


def _unload_copies(r: TritonReloader, model: str) -> str:
    """Unload every canary copy and wait until they are gone; look again once for a load still in flight."""
    gone: list[str] = []
    try:
        for _ in range(2):
            names = loaded_copies(r, model)
            for name in names:
                r.client.unload(name)
                deadline = time.monotonic() + r.timeout_s
                while r.client.model_ready(name):
                    if time.monotonic() > deadline:
                        return f"{r.url}: '{name}' was still ready {r.timeout_s:.0f} s after its unload"
                    time.sleep(0.1)
            gone += names
            time.sleep(0.5)  # a load the canary sent just before it died completes after our unload: look again
    except PipelineError as e:
        return f"{r.url}: could not unload the canary's copies: {e.what}"
    return f"{r.url}: unloaded the canary's copies {sorted(set(gone))}" if gone else f"{r.url}: no canary copy was loaded"


def _retire_others(r: TritonReloader, live: int, cfg: mc.ModelConfig) -> list[int]:
    """Reload the environment's model serving exactly ``[live]``; returns the versions that were unloaded."""
    r.client.load(r.model, pointer.to_json(pointer.with_policy(cfg, r.model, [live])))
    index = r.client.raw.get_model_repository_index()
    others = sorted({int(m["version"]) for m in index if m.get("name") == r.model and m.get("version") and m.get("state") == "READY"} - {live})
    for v in others:
        r.wait(v, False, after_flip=True)
    if not r.ready(live):
        raise ReleaseError(f"version {live} of '{r.model}' is not ready on {r.url} after the reload", fix="check the server's log")
    return others


def restore(
    store: ReleaseStore,
    env: str,
    model: str,
    servers: list[str],
    env_model: bool,
    take_lock: bool,
    timeout_s: float = 120.0,
    event: HistoryEvent | None = None,
) -> list[str]:
    """Unload the candidate's copy everywhere and, with ``env_model``, reload the environment's model from its pointer.

    ``take_lock``: take the environment's lock for the reload (the caller does not hold it). ``event``: the
    promotion a killed canary was making; if the pointer already names it but the history does not, it is added.
    Returns one line per action; a server that cannot be reached is reported, not raised.
    """
    done: list[str] = []
    reloaders = [TritonReloader(u, model, timeout_s) for u in servers]
    try:
        for r in reloaders:
            done.append(_unload_copies(r, model))
        if env_model:
            lock = store.env_lock(env, model, f"canary cleanup of {model} in {env}") if take_lock else contextlib.nullcontext()
            try:
                with lock:
                    done += _follow_pointer(store, env, model, reloaders, event)
            except ReleaseError as e:  # someone else holds the lock: they are switching; leave their servers alone
                done.append(f"left '{model}' as it is: {e.what}")
    finally:
        for r in reloaders:
            r.close()
    return done


def _follow_pointer(store: ReleaseStore, env: str, model: str, reloaders: list[TritonReloader], event: HistoryEvent | None) -> list[str]:
    state = store.env_state(env, model)
    if state.live is None:
        return ["the pointer names no version: nothing to reload"]
    done = []
    if event and state.live == event["version"] and live_stack(state.history)[-1:] != [state.live]:
        # Killed between the flip and its history entry: the pointer is the truth, the history catches up.
        store.record_intent(env, model, {**event, "at": now(), "note": "recorded by the canary guard: the canary died after the flip"}, state)
        done.append(f"history: added the promotion to version {state.live} the pointer already named")
    cfg = pointer.parse_config(store.fs.read_text(f"{store.model_rel(env, model)}/config.pbtxt"), "pointer")
    for r in reloaders:
        try:
            gone = _retire_others(r, state.live, cfg)
            done.append(f"{r.url}: '{model}' serves version {state.live} (the pointer)" + (f"; unloaded {gone}" if gone else ""))
        except Exception as e:  # noqa: BLE001 - report each server, keep going
            done.append(f"{r.url}: could not reload '{model}' from the pointer: {getattr(e, 'what', str(e))[:300]}")
    return done


def mark(store: ReleaseStore, env: str, model: str, rid: str, status: str, note: str, cleanup: list[str]) -> None:
    """Set the status of a canary's record that has no verdict yet (a verdict is never overwritten)."""
    rec = canaries.read(store.fs, env, model, rid)
    if rec is None or rec.final:
        return
    write_record(store.fs, dataclasses.replace(rec, status=status, note=note, cleanup=cleanup, finished_at=now()))


# ---------------------------------------------------------------- the guard process
@dataclass(frozen=True)
class GuardSpec:
    """What the guard process needs to put the servers back: the store, the environment, the servers, the record to mark."""

    store: str  # the store's URL
    environments: list[str]
    lease_s: float
    env: str
    model: str
    servers: list[str]
    record: str  # the canary record's id
    parent: int  # the canary's pid (named in the guard's messages)
    timeout_s: float
    event: HistoryEvent  # the promotion the canary makes when it passes

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> GuardSpec:
        return cls(**json.loads(text))


class Guard:
    """The parent's end: start the guard, tell it the phase, and tell it when cleanup is done."""

    def __init__(self, spec: GuardSpec) -> None:
        root = str(Path(__file__).resolve().parents[3])  # the directory holding the pipeline package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.release.canary.guard", spec.to_json()], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, start_new_session=True
        )

    def tell(self, word: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.proc.stdin.write(f"{word}\n".encode())
            self.proc.stdin.flush()

    def done(self) -> None:
        """The canary cleaned up after itself: the guard exits without acting."""
        self.tell("done")
        assert self.proc.stdin is not None  # Popen(stdin=PIPE)
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _say(msg: str) -> None:
    with contextlib.suppress(OSError):
        print(f"canary guard: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, say: Callable[[str], None] = _say) -> int:
    """Wait for the canary's pipe to close; clean up if it closed without ``done``."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe ends the guard
    spec = GuardSpec.from_json((argv or sys.argv[1:])[0])
    switching = done = False
    while line := sys.stdin.buffer.readline():
        word = line.decode().strip()
        switching |= word == "switching"
        done |= word == "done"
    if done:
        return 0
    store = ReleaseStore(spec.store, spec.environments, spec.lease_s)
    say(f"the canary (pid {spec.parent}) ended without cleaning up; putting {spec.servers} back to the pointer of '{spec.env}'")
    lines = restore(store, spec.env, spec.model, spec.servers, env_model=switching, take_lock=store.fs.local, timeout_s=spec.timeout_s, event=spec.event if switching else None)
    for ln in lines:
        say(ln)
    with contextlib.suppress(ReleaseError, OSError):
        mark(
            store,
            spec.env,
            spec.model,
            spec.record,
            "killed",
            f"the canary died {'while switching' if switching else 'before any switch'}; its guard unloaded the candidate and left the servers on the pointer",
            lines,
        )
    return 0


if __name__ == "__main__":  # pragma: no cover - started by Guard
    raise SystemExit(main())
