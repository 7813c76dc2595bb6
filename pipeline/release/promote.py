"""``release promote`` / ``release rollback``: switch the version an environment serves.

Order of a switch (promote or rollback) to version N in environment E:

0. take the environment's lock (local: flock; object stores: a lease object created with a
   conditional write, see :mod:`pipeline.release.store.lock`) and read pointer and history under it;
1. verify release N in the store (every sha256; the signature too with a public key);
2. copy its version directory into ``envs/E/<model>/N/`` and its warmup rows into
   ``envs/E/<model>/warmup/N/`` (:mod:`pipeline.release.store.env_copy`), each under a staging name, verify
   every copied file, then rename it into place (Triton ignores non-numeric names);
3. with ``--reload`` (one server, or each server of a fleet): load N next to the serving version
   and wait until it is ready; if any server fails, the ones already loaded go back to the old one;
4. record the event in history/<env>/<model>.json as an intent carrying the sha256 of the pointer
   about to be written (only if the history is still the one read under the lock);
5. flip: replace ``envs/E/<model>/config.pbtxt`` atomically (version_policy [N]), after renewing
   the lock, and only if the pointer is still the one read under the lock (S3: If-Match). The flip
   confirms the intent: every reader (:func:`pipeline.release.store.history.reconcile`) takes an intent whose
   pointer never flipped as aborted, so a kill or an error between 4 and 5 leaves no disagreement;
6. with ``--reload`` retire the old version; move the GTO stage in git when a repository is given
   (a version without a GTO registration tag is refused at step 1 instead). A failure here does
   not undo the switch: the command succeeds and names the step to retry.

Nothing before step 5 changes what anyone serves; rollback never deletes a version. Promoting
the live version again is a no-op, unless its copy lacks the warmup rows or the pointer is not
what the release renders now (an environment promoted before environments carried warmup data,
whose config names files Triton cannot open): then the same steps repair it in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import ReleaseError
from pipeline.records.release import ReleaseManifest
from pipeline.release.evidence import tags
from pipeline.release.store import env_copy, faults, pointer
from pipeline.release.store.checksums import raise_on_mismatch
from pipeline.release.store.history import HistoryEvent, live_stack, now, user, variant_of
from pipeline.release.store.lock import HeldLock
from pipeline.release.store.store import EnvState, ReleaseStore
from pipeline.release.triton_control import TritonReloader
from pipeline.repository.warmup import WARMUP_DIR


@dataclass
class SwitchResult:
    """Outcome of one promote or rollback."""

    action: str  # promote | rollback | noop
    env: str
    model: str
    version: int
    previous: int | None
    copy: str = ""  # copied | present | replaced
    tag: tags.TagResult | None = None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    retry: list[str] = field(default_factory=list)  # steps after the flip that failed: the switch stands, these must be redone
    repin: bool = False  # a text endpoint kept at its version, now calling its model's new one (promote_set)


@dataclass(frozen=True)
class SwitchOptions:
    """What a command adds to a switch: the servers to switch live, the key signatures must verify with, the git repository to tag."""

    reload: tuple[str, ...] = ()  # Triton URLs (a fleet: several); empty: the store only
    public_key: str | None = None
    git_repo: str | None = None  # None: no GTO tags

    @classmethod
    def of(cls, reload_url: str | list[str] | None = None, public_key: str | None = None, git_repo: str | None = None) -> SwitchOptions:
        """The options as the command line gives them (``--reload`` repeated or comma-separated)."""
        return cls(tuple(reload_urls(reload_url)), public_key, git_repo)


@dataclass(frozen=True)
class Switch:
    """One switch of ``env`` to ``target``, with the environment's ``state`` as it was read under its lock."""

    env: str
    model: str
    target: int
    action: str  # promote | rollback
    state: EnvState
    variant: str | None = None  # None: the release's config.pbtxt
    event: HistoryEvent = field(default_factory=lambda: HistoryEvent())  # more for the history event (rolled_back, canary)
    pin: int | None = None  # a text endpoint: the version of its tensor model it calls (pointer.pinned)
    keep: int | None = None  # served beside the target after the flip, until the set's companions switched (promote_set)


def default_version(store: ReleaseStore, model: str, env: str) -> tuple[int, str]:
    """The version to promote when none is given, and why it was chosen.

    The version live in the previous environment of the chain (dev -> staging ->
    production) if there is one, else the newest release.
    """
    idx = store.environments.index(env)
    if idx > 0:
        prev = store.environments[idx - 1]
        live = store.env_state(prev, model).live
        if live is not None:
            return live, f"live in '{prev}'"
    versions = store.versions(model)
    if not versions:
        raise ReleaseError(f"there are no releases of '{model}' in {store.url}", fix="build one with `release build`")
    return versions[-1], "newest release"


@contextlib.contextmanager
def _timed(timings: dict[str, float], key: str) -> Iterator[None]:
    t = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t


def switch(store: ReleaseStore, sw: Switch, opts: SwitchOptions, guard: HeldLock) -> SwitchResult:
    """Steps 1-6 of the module docstring for ``sw``, whose state was read under the lock ``guard`` holds.

    Raises:
        ReleaseError: see :func:`promote`; the pointer is unchanged unless the flip happened.
    """
    t0 = time.perf_counter()
    res = SwitchResult(sw.action, sw.env, sw.model, sw.target, sw.state.live, notes=list(guard.notes))
    if sw.state.live is not None and not store.is_release(sw.model, sw.state.live):
        res.notes.append(f"the pointer named version {sw.state.live}, which is not a release in the store; it now names {sw.target}")
    with _timed(res.timings, "verify_release_s"):
        m, cfg, variant_name = check_target(store, sw, opts)
    with _timed(res.timings, "install_s"):
        res.copy = store.install_version(sw.env, sw.model, sw.target, m)
    _switch_installed(store, sw, opts, guard, (cfg, variant_name), res)
    try:
        res.tag = tags.switch(opts.git_repo, sw.model, sw.env, sw.target, f"{sw.action} {sw.model} v{sw.target} to {sw.env} (store {store.url})")
    except ReleaseError as e:  # the live version changed: the tag is the step to retry, not a failure of the switch
        res.retry.append(f"{e.what} (fix: {e.fix})")
    res.timings["total_s"] = time.perf_counter() - t0
    return res


def check_target(store: ReleaseStore, sw: Switch, opts: SwitchOptions) -> tuple[ReleaseManifest, mc.ModelConfig, str]:
    """Step 1: the verified manifest of the target, and the config (and variant name) the environment will serve.

    Raises:
        ReleaseError: a checksum, the signature, the evidence policy, the variant or the GTO tag refuses it.
    """
    m = store.verify_release(sw.model, sw.target)
    store.check_signature(sw.model, sw.target, opts.public_key)
    if sw.action != "rollback":  # a rollback goes back to a version this environment already accepted
        store.check_evidence(m, sw.env)
    cfg, variant_name = store.release_config(sw.model, sw.target, sw.variant)  # a variant not in the manifest stops here, before any copy
    cfg = pointer.pinned(cfg, sw.pin)
    # With tagging on, a version GTO does not know is refused here, before anything changes.
    tags.check_assignable(opts.git_repo, sw.model, sw.target, m.commit)
    return m, cfg, variant_name


def _switch_installed(store: ReleaseStore, sw: Switch, opts: SwitchOptions, guard: HeldLock, config: tuple[mc.ModelConfig, str], res: SwitchResult) -> None:
    """Steps 3-6 once the target is installed; a refusal before the flip takes back the copy and the servers.

    Raises:
        ReleaseError: the release lacks warmup files, a server cannot load it, the lock, history or pointer changed.
    """
    cfg, variant_name = config
    reloaders = [TritonReloader(u, sw.model) for u in opts.reload]
    staged: list[TritonReloader] = []
    flipped = False
    try:
        _check_warmup(store, sw, cfg)
        data = pointer.render(cfg, sw.env, sw.model, sw.target, variant_name, sw.keep)
        if reloaders:
            with _timed(res.timings, "triton_load_new_s"):
                for r in reloaders:  # every server reachable before any of them changes
                    r.check()
                for r in reloaders:
                    r.stage(cfg, sw.state.live, sw.target)
                    staged.append(r)
        with _timed(res.timings, "flip_s"):
            guard.check()  # we still hold the lock (renewed now), so nobody else switches until we are done
            # The event first, as an intent naming the pointer's sha256; the flip confirms it (history.reconcile).
            store.record_intent(sw.env, sw.model, _event(sw, opts, variant_name, data), sw.state)
            store.flip(sw.env, sw.model, data, sw.state.pointer_tag)  # the one atomic step
            flipped = True
            faults.point("after_flip")
        if reloaders and sw.keep is None:
            with _timed(res.timings, "triton_retire_old_s"):
                res.retry += retire_old(reloaders, sw, cfg)
    except BaseException:
        if not flipped:
            _take_back(store, sw, res.copy, staged)
        raise
    finally:
        for r in reloaders:
            r.close()


def _check_warmup(store: ReleaseStore, sw: Switch, cfg: mc.ModelConfig) -> None:
    """Refuse a release built before `release build` checked its warmup files: no server could load its pointer."""
    missing = env_copy.missing_warmup(store, sw.env, sw.model, cfg)
    if missing:
        raise ReleaseError(
            f"release {sw.target} of '{sw.model}' names model_warmup files it does not carry, so Triton could not load it in '{sw.env}'",
            fix="build a new release (`dvc repro repository`, then `release build`); the pointer was not changed",
            details={"missing": ", ".join(missing)},
        )


def _event(sw: Switch, opts: SwitchOptions, variant_name: str, pointer_bytes: bytes) -> HistoryEvent:
    """The history event of the switch, recorded as an intent that names the sha256 of the pointer about to be written."""
    return HistoryEvent(
        action=sw.action,
        version=sw.target,
        previous=sw.state.live,
        variant=variant_name,
        at=now(),
        by=user(),
        reload=",".join(opts.reload) or None,
        **sw.event,
        pointer_sha256=hashlib.sha256(pointer_bytes).hexdigest(),
    )


def retire_old(reloaders: list[TritonReloader], sw: Switch, cfg: mc.ModelConfig) -> list[str]:
    """Step 6 on every server; the switch happened, so a failure is a step to retry (returned), not an error."""
    retry = []
    for r in reloaders:
        try:
            r.retire(sw.state.live, sw.target, cfg)
        except ReleaseError as e:
            retry.append(f"{e.what} (fix: {e.fix})")
    return retry


def _take_back(store: ReleaseStore, sw: Switch, copy: str, staged: list[TritonReloader]) -> None:
    """A switch refused before its flip changed nothing: drop the copy it made, and put loaded servers back on the old version."""
    _drop_unserved_copy(store, sw.env, sw.model, sw.target, copy)
    if sw.state.live is None or not staged:
        return
    # A server that already loaded the new version beside the old one goes back to the old one
    # (the pointer, unchanged, still names it), so the fleet stays on one version.
    old_cfg = pointer.parse_config(store.fs.read_text(f"{store.model_rel(sw.env, sw.model)}/config.pbtxt"), "pointer")
    for r in staged:
        with contextlib.suppress(ReleaseError):
            r.retire(sw.target, sw.state.live, old_cfg)


def _drop_unserved_copy(store: ReleaseStore, env: str, model: str, version: int, copy: str | None) -> None:
    """A refused switch changed nothing: the copy it made for it (version dir and warmup rows) goes again.

    Only a copy this command made ("copied"/"replaced"): one that was already there ("present") may be an
    earlier version kept for rollback. The version dir first: its presence means the whole copy was made.
    """
    if copy not in ("copied", "replaced"):
        return
    with contextlib.suppress(Exception):  # the refusal is the error to report
        for rel in (f"{store.model_rel(env, model)}/{version}", f"{store.model_rel(env, model)}/{WARMUP_DIR}/{version}"):
            store.fs.remove_tree(rel)


def reload_urls(reload_url: str | list[str] | None) -> list[str]:
    """Triton URLs to switch live: one, several (a fleet: repeated --reload, or comma-separated), or none."""
    items = [reload_url] if isinstance(reload_url, str) else list(reload_url or [])
    return [u.strip() for item in items for u in item.split(",") if u.strip()]


def promote(
    store: ReleaseStore,
    env: str,
    model: str | None = None,
    version: int | None = None,
    variant: str | None = None,
    reload_url: str | list[str] | None = None,
    public_key: str | None = None,
    git_repo: str | None = None,
) -> SwitchResult:
    """Make ``version`` (default: see :func:`default_version`) the live version of ``env``.

    Raises:
        ReleaseError: unknown env, version does not exist, a checksum or signature fails,
        with ``git_repo`` the version has no GTO tag, the store is not writable, or Triton
        cannot load the new version (pointer unchanged).
    """
    store.check_env(env)
    model = store.resolve_model(model)
    notes = []
    if version is None:
        version, why = default_version(store, model, env)
        notes.append(f"version {version} chosen: {why}")
    else:
        store.manifest(model, version)  # a clear "does not exist" before anything else
    state = store.env_state(env, model)
    pin = live_pin(store, env, model, version, variant)
    live_variant = variant_of(state.history, version) or "default"
    if state.live == version and variant is not None and variant != live_variant:
        notes.append(f"version {version} is live in '{env}' with variant '{live_variant}': switching it to '{variant}'")
    elif state.live == version:
        repair = _repair(store, env, model, version, state, pin)
        if repair is None:
            return SwitchResult("noop", env, model, version, version, "present", notes=notes + [f"version {version} is already live in '{env}'"])
        notes.append(repair)
        variant = variant_of(state.history, version)  # a repair keeps the live config's variant
    with store.env_lock(env, model, f"promote {model} v{version} to {env}") as guard:
        state = store.env_state(env, model)  # re-read under the lock: its tags guard the flip
        res = switch(store, Switch(env, model, version, "promote", state, variant, pin=pin), SwitchOptions.of(reload_url, public_key, git_repo), guard)
    res.notes = notes + res.notes
    return res


def live_pin(store: ReleaseStore, env: str, model: str, version: int, variant: str | None) -> int | None:
    """For a text endpoint switched on its own: the version of its tensor model live in ``env``, which it will call
    (None for any other model).

    Raises:
        ReleaseError: the tensor model is not served in ``env`` (the endpoint would answer nothing).
    """
    cfg, _ = store.release_config(model, version, variant)
    tensor = pointer.calls(cfg)
    if tensor is None:
        return None
    live = store.env_state(env, tensor).live if tensor in store.models() else None
    if live is None:
        raise ReleaseError(
            f"'{model}' calls '{tensor}', which '{env}' does not serve, so it could answer nothing there",
            fix=f"switch the set: `release promote --to {env}` without --model promotes '{tensor}' and '{model}' together",
        )
    return live


def _repair(store: ReleaseStore, env: str, model: str, version: int, state: EnvState, pin: int | None = None) -> str | None:
    """Why the live ``version`` must be installed and flipped to again (None: it is as the release renders it).

    Raises:
        ReleaseError: its served files changed (a repair would hide that; promote another version first).
    """
    problems = store.verify_env_copy(env, model, version, store.verify_release(model, version))
    if problems and not env_copy.only_warmup_missing(problems):
        raise_on_mismatch(
            problems,
            f"version {version} is live in '{env}' but its files changed",
            store.fs.path(store.model_rel(env, model), str(version)),
            "promote another version, then promote this one again to rewrite the copy",
        )
    cfg, variant_name = store.release_config(model, version, variant_of(state.history, version))
    cfg = pointer.pinned(cfg, pin)
    stale = store.fs.read_bytes(f"{store.model_rel(env, model)}/config.pbtxt") != pointer.render(cfg, env, model, version, variant_name)
    stack = live_stack(state.history)
    unrecorded = not stack or stack[-1] != version
    why = ([f"{len(problems)} warmup file(s) are missing"] if problems else []) + (["its config.pbtxt is not what the release renders"] if stale else [])
    why += ["its promotion history does not record it as live"] if unrecorded else []
    if not why:
        return None
    return f"version {version} is live in '{env}' but {' and '.join(why)}: repaired in place"


def rollback(
    store: ReleaseStore,
    env: str,
    model: str | None = None,
    reload_url: str | list[str] | None = None,
    public_key: str | None = None,
    git_repo: str | None = None,
) -> SwitchResult:
    """Make the version that was live before the current one live again; delete nothing.

    Raises:
        ReleaseError: nothing earlier to roll back to, the pointer and history disagree, or
        with ``git_repo`` the earlier version has no GTO tag (nothing changed then).
    """
    store.check_env(env)
    model = store.resolve_model(model)
    with store.env_lock(env, model, f"rollback {model} in {env}") as guard:
        state = store.env_state(env, model)
        live, target = rollback_target(store, env, state)
        variant = variant_of(state.history, target)
        sw = Switch(env, model, target, "rollback", state, variant, HistoryEvent(rolled_back=live), pin=live_pin(store, env, model, target, variant))
        return switch(store, sw, SwitchOptions.of(reload_url, public_key, git_repo), guard)


def rollback_target(store: ReleaseStore, env: str, state: EnvState) -> tuple[int, int]:
    """The live version, and the version that was live before it.

    Raises:
        ReleaseError: nothing is live, the pointer and history disagree, or nothing earlier was promoted.
    """
    store.check_pointer(state)
    stack = live_stack(state.history)
    if state.live is None:
        raise ReleaseError(f"nothing has been promoted to '{env}' yet, so there is nothing to roll back", fix=f"promote first: `release promote --to {env}`")
    if stack and stack[-1] != state.live:
        raise ReleaseError(
            f"the pointer of '{env}' says version {state.live} but its promotion history ends at {stack[-1]}",
            fix=f"config.pbtxt was edited by hand: `release promote --to {env} --version {state.live}` records the live version"
            f" (or `--version <N>` to serve another), then roll back",
        )
    if len(stack) < 2:
        raise ReleaseError(
            f"no earlier release to roll back to in '{env}': version {state.live} is the first one promoted there",
            fix=f"promote a specific version instead: `release promote --to {env} --version <N>`",
            details={"live": state.live, "history": [f"{e['action']} {e['version']}" for e in state.history] or "(empty)"},
        )
    return state.live, stack[-2]
