"""Mutual exclusion in the release store: an flock on local stores, a lease object on object stores.

Why a lease object taken with a conditional write, on S3. The pointer (config.pbtxt) and the
history (history/<env>/<model>.json) are two objects, and S3 has no multi-object transaction.
Conditional writes on each object alone are not enough: two promotions can each win one of
the two writes, leaving a pointer that disagrees with the history. So a promotion first
*creates* ``history/<env>/<model>.lock`` with ``If-None-Match: *``: S3 lets exactly one
creator succeed (the other gets 412 PreconditionFailed), with no clock involved. The holder
keeps it alive (a heartbeat re-PUTs it with ``If-Match`` on its own ETag every
``lease_s / 4``) and deletes it when done. A holder that died (SIGKILL, lost machine) leaves
the lock behind; once its last heartbeat is ``lease_s`` old *by the server's clock*
(``LastModified`` against the response's ``Date``), the next promotion takes it over, again
with ``If-Match`` on the stale ETag, so of two processes taking over only one wins. Under the
lock, the pointer and history writes are conditional too (``If-Match`` on the ETags read under
the lock): a writer that bypassed the lock makes the promotion fail instead of being
overwritten. This is the same scheme as Terraform's S3 backend lock file, plus an expiry.

Why not conditional writes on the pointer alone (no lock): the loser would find out only at
its flip, after copying its version into the environment, and the history could not be
kept in the pointer's order. Why not a lease without conditional writes: "read, see no
lock, write the lock" races; only the server can make the create exclusive.

The same lease (without takeover) claims a release number while it is uploaded
(:mod:`pipeline.release.store.publish`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Protocol, TypedDict

from pipeline.core.errors import ReleaseError
from pipeline.release.store.fs import StoreFS
from pipeline.release.store.history import now, user
from pipeline.release.store.s3 import Conflict


class LockHolder(TypedDict, total=False):
    """What a lock object says about its holder (empty when it cannot be read)."""

    command: str
    user: str
    host: str
    pid: int
    since: str
    lease_s: float
    token: str  # unique to this holder: with the beat count, every PUT's bytes (so its ETag) differ
    beat: int


class Busy(Exception):
    """The lease is held by someone else (``holder``: what its object says, ``age_s``: since its last heartbeat)."""

    def __init__(self, rel: str, holder: LockHolder, age_s: float) -> None:
        self.rel, self.holder, self.age_s = rel, holder, age_s
        super().__init__(rel)

    def who(self) -> str:
        h = self.holder
        return f"{h.get('command', '?')} by {h.get('user', '?')}@{h.get('host', '?')} pid {h.get('pid', '?')}, since {h.get('since', '?')}"


class Lease:
    """A lock object at ``rel``: created exclusively, renewed by a heartbeat, deleted when done."""

    def __init__(self, fs: StoreFS, rel: str, lease_s: float, command: str) -> None:
        self.fs, self.rel, self.lease_s = fs, rel, lease_s
        self.token = uuid.uuid4().hex
        self.body = LockHolder(command=command, user=user(), host=socket.gethostname(), pid=os.getpid(), since=now(), lease_s=lease_s)
        self.tag: str | None = None
        self.beats = 0
        self.lost: str | None = None
        self.notes: list[str] = []
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _bytes(self) -> bytes:
        # The token and the beat count make every PUT's bytes (so its ETag) unique to this holder and beat.
        return json.dumps(LockHolder(**self.body, token=self.token, beat=self.beats)).encode()

    def acquire(self, take_over: bool = True) -> None:
        """Create the lock object; with ``take_over`` replace one whose holder stopped renewing it.

        Raises:
            Busy: a live holder has it (or won the takeover).
        """
        for _ in range(3):
            try:
                self.tag = self.fs.write_if(self.rel, self._bytes(), None)
                break
            except Conflict:
                pass
            seen = self.fs.tag_and_age(self.rel)
            if seen is None:
                continue  # released between our create and our look: try again
            tag, age = seen
            if not take_over or age <= self.lease_s:
                raise Busy(self.rel, self._holder(), age)
            holder = self._holder()
            try:
                self.tag = self.fs.write_if(self.rel, self._bytes(), tag)
            except Conflict:
                raise Busy(self.rel, self._holder(), 0.0) from None
            self.notes.append(f"took over a lock abandoned {age:.0f} s ago ({Busy(self.rel, holder, age).who()})")
            break
        else:
            raise Busy(self.rel, self._holder(), 0.0)
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease {self.rel}", daemon=True)
        self._thread.start()

    def _holder(self) -> LockHolder:
        got = self.fs.read_tagged(self.rel)
        try:
            return json.loads(got[0]) if got else {}
        except (ValueError, TypeError):
            return {}

    def renew(self) -> None:
        """Re-PUT the lock (If-Match our ETag); on a lost lease record why and stop."""
        with self._mutex:
            if self.lost or self.tag is None:
                return
            self.beats += 1
            try:
                self.tag = self.fs.write_if(self.rel, self._bytes(), self.tag)
            except Conflict:
                self.lost = f"the lock {self.fs.path(self.rel)} was taken over (no heartbeat for {self.lease_s:.0f} s?)"
            except Exception as e:  # noqa: BLE001 - a failed heartbeat is reported by check(), not in this thread
                self.lost = f"renewing the lock failed: {type(e).__name__}"

    def _heartbeat(self) -> None:
        while not self._stop.wait(max(self.lease_s / 4, 0.2)):
            self.renew()
            if self.lost:
                return

    def check(self) -> None:
        """Renew now and make sure we still hold the lock; call right before an irreversible write.

        Raises:
            ReleaseError: the lease was lost (nothing was changed by us after that).
        """
        self.renew()
        if self.lost:
            raise ReleaseError(
                f"lost the lock before writing: {self.lost}",
                fix="nothing was switched; run the command again (and check the network to the store)",
                details={"lock": self.fs.path(self.rel), "lease_s": self.lease_s},
            )

    def release(self) -> None:
        """Stop the heartbeat and delete the lock if it is still ours (never raises)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._mutex:
            if self.tag is None or self.lost:
                return
            with contextlib.suppress(Exception):  # a lock we cannot delete expires after lease_s
                self.fs.delete_if(self.rel, self.tag)
            self.tag = None


class HeldLock(Protocol):
    """What holding an environment's lock gives the caller: ``check()`` right before an irreversible write, and notes."""

    notes: list[str]

    def check(self) -> None: ...


class _NoGuard:
    """What a local flock gives the caller: nothing to renew, nothing to note."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def check(self) -> None:
        return None


@contextlib.contextmanager
def env_lock(fs: StoreFS, env: str, model: str, lease_s: float, command: str) -> Iterator[HeldLock]:
    """Hold the lock of ``env``/``model`` for one promote or rollback; yields an object with ``check()``.

    Raises:
        ReleaseError: another promote or rollback holds it (named, with how long until it expires).
    """
    busy_fix = "wait for it to finish, then run this command again"
    if fs.local:
        fs.probe_writable("history")
        path = fs.local_path("history", f".{env}.{model}.lock")
        with open(path, "a+b") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ReleaseError(f"another promote or rollback of '{model}' in '{env}' is running", fix=busy_fix, details={"lock": path}) from None
            try:
                yield _NoGuard()
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return
    lease = Lease(fs, f"history/{env}/{model}.lock", lease_s, command)
    try:
        lease.acquire(take_over=True)
    except Busy as b:
        left = max(lease_s - b.age_s, 0)
        raise ReleaseError(
            f"another promote or rollback of '{model}' in '{env}' is running: {b.who()}",
            fix=f"{busy_fix}; if that process died, its lock expires {left:.0f} s from now (release.lock_lease_s={lease_s:g}) and the next promote takes it over",
            details={"lock": fs.path(lease.rel), "last heartbeat": f"{b.age_s:.0f} s ago"},
        ) from None
    try:
        yield lease
    finally:
        lease.release()
