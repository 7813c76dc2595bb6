"""``release promote`` / ``release rollback`` / ``release verify``.

Order of a switch (promote or rollback) to version N in environment E:

0. take the environment's lock (local: flock; object stores: a lease object created with a
   conditional write, see :mod:`pipeline.release.lock`) and read pointer and history under it;
1. verify release N in the store (every sha256; the signature too with a public key);
2. copy its version directory into ``envs/E/<model>/N/`` and its warmup rows into
   ``envs/E/<model>/warmup/N/`` (:mod:`pipeline.release.env_copy`), each under a staging name, verify
   every copied file, then rename it into place (Triton ignores non-numeric names);
3. with ``--reload`` (one server, or each server of a fleet): load N next to the serving version
   and wait until it is ready; if any server fails, the ones already loaded go back to the old one;
4. record the event in history/<env>/<model>.json as an intent carrying the sha256 of the pointer
   about to be written (only if the history is still the one read under the lock);
5. flip: replace ``envs/E/<model>/config.pbtxt`` atomically (version_policy [N]), after renewing
   the lock, and only if the pointer is still the one read under the lock (S3: If-Match). The flip
   confirms the intent: every reader (:func:`pipeline.release.store.reconcile`) takes an intent whose
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
import getpass
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.errors import ReleaseError
from pipeline.release import env_copy, faults, gto_tags, pointer, publish, signing, verify_env
from pipeline.release.history import live_stack, variant_of
from pipeline.release import manifest as mf
from pipeline.release.lock import Lease
from pipeline.release.store import EnvState, ReleaseStore
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
    tag: gto_tags.TagResult | None = None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    retry: list[str] = field(default_factory=list)  # steps after the flip that failed: the switch stands, these must be redone


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


def switch(  # noqa: C901, PLR0912, PLR0913, PLR0915
    store: ReleaseStore,
    env: str,
    model: str,
    target: int,
    state: EnvState,
    action: str,
    variant: str | None,
    reload_url: str | list[str] | None,
    public_key: str | None,
    git_repo: str | None,
    extra: dict[str, Any],
    guard: Lease | Any,
) -> SwitchResult:
    """Steps 1-6 of the module docstring for ``target``, with ``state`` read under the lock ``guard`` holds.

    ``extra`` goes into the history event (rollback: the version rolled back; canary: the canary's id).

    Raises:
        ReleaseError: see :func:`promote`; the pointer is unchanged unless the flip happened.
    """
    t0 = time.perf_counter()
    res = SwitchResult(action, env, model, target, state.live, notes=list(guard.notes))
    if state.live is not None and not store.is_release(model, state.live):
        res.notes.append(f"the pointer named version {state.live}, which is not a release in the store; it now names {target}")
    m = store.verify_release(model, target)
    store.check_signature(model, target, public_key)
    if action != "rollback":  # a rollback goes back to a version this environment already accepted
        store.check_evidence(m, env)
    cfg, variant_name = store.release_config(model, target, variant)  # a variant not in the manifest stops here, before any copy
    # With tagging on, a version GTO does not know is refused here, before anything changes.
    gto_tags.check_assignable(git_repo, model, target, (m.get("git") or {}).get("commit"))
    res.timings["verify_release_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    res.copy = store.install_version(env, model, target, m)
    res.timings["install_s"] = time.perf_counter() - t
    reloaders = [TritonReloader(u, model) for u in reload_urls(reload_url)]
    staged: list[TritonReloader] = []
    flipped = False
    try:  # from here a refusal takes back the copy it made (_drop_unserved_copy below)
        missing = env_copy.missing_warmup(store, env, model, cfg)
        if missing:  # a release built before `release build` checked its warmup files: no server could load this pointer
            raise ReleaseError(
                f"release {target} of '{model}' names model_warmup files it does not carry, so Triton could not load it in '{env}'",
                fix="build a new release (`dvc repro repository`, then `release build`); the pointer was not changed",
                details={"missing": ", ".join(missing)},
            )
        data = pointer.render(cfg, env, model, target, variant_name)
        if reloaders:
            t = time.perf_counter()
            for r in reloaders:  # every server reachable before any of them changes
                r.check()
            for r in reloaders:
                r.stage(cfg, state.live, target)
                staged.append(r)
            res.timings["triton_load_new_s"] = time.perf_counter() - t
        t = time.perf_counter()
        guard.check()  # we still hold the lock (renewed now), so nobody else switches until we are done
        # The event first, as an intent naming the pointer's sha256; the flip confirms it (store.reconcile).
        store.record_intent(
            env,
            model,
            {
                "action": action,
                "version": target,
                "previous": state.live,
                "variant": variant_name,
                "at": mf.now(),
                "by": _user(),
                "reload": ",".join(reload_urls(reload_url)) or None,
                **extra,
                "pointer_sha256": hashlib.sha256(data).hexdigest(),
            },
            state,
        )
        store.flip(env, model, data, state.pointer_tag)  # the one atomic step
        flipped = True
        faults.point("after_flip")
        res.timings["flip_s"] = time.perf_counter() - t
        if reloaders:
            t = time.perf_counter()
            for r in reloaders:
                try:
                    r.retire(state.live, target, cfg)
                except ReleaseError as e:  # the switch happened: report it, and the step to retry
                    res.retry.append(f"{e.what} (fix: {e.fix})")
            res.timings["triton_retire_old_s"] = time.perf_counter() - t
    except BaseException:
        if not flipped:
            _drop_unserved_copy(store, env, model, target, res.copy)
        if not flipped and state.live is not None and staged:
            # A server that already loaded the new version beside the old one goes back to the old one
            # (the pointer, unchanged, still names it), so the fleet stays on one version.
            old_cfg = pointer.parse_config(store.fs.read_text(f"{store.model_rel(env, model)}/config.pbtxt"), "pointer")
            for r in staged:
                with contextlib.suppress(ReleaseError):
                    r.retire(target, state.live, old_cfg)
        raise
    finally:
        for r in reloaders:
            r.close()
    try:
        res.tag = gto_tags.switch(git_repo, model, env, target, f"{action} {model} v{target} to {env} (store {store.url})")
    except ReleaseError as e:  # the live version changed: the tag is the step to retry, not a failure of the switch
        res.retry.append(f"{e.what} (fix: {e.fix})")
    res.timings["total_s"] = time.perf_counter() - t0
    return res


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
    live_variant = variant_of(state.history, version) or "default"
    if state.live == version and variant is not None and variant != live_variant:
        notes.append(f"version {version} is live in '{env}' with variant '{live_variant}': switching it to '{variant}'")
    elif state.live == version:
        repair = _repair(store, env, model, version, state)
        if repair is None:
            return SwitchResult("noop", env, model, version, version, "present", notes=notes + [f"version {version} is already live in '{env}'"])
        notes.append(repair)
        variant = variant_of(state.history, version)  # a repair keeps the live config's variant
    with store.env_lock(env, model, f"promote {model} v{version} to {env}") as guard:
        state = store.env_state(env, model)  # re-read under the lock: its tags guard the flip
        res = switch(store, env, model, version, state, "promote", variant, reload_url, public_key, git_repo, {}, guard)
    res.notes = notes + res.notes
    return res


def _repair(store: ReleaseStore, env: str, model: str, version: int, state: EnvState) -> str | None:
    """Why the live ``version`` must be installed and flipped to again (None: it is as the release renders it).

    Raises:
        ReleaseError: its served files changed (a repair would hide that; promote another version first).
    """
    problems = store.verify_env_copy(env, model, version, store.verify_release(model, version))
    if problems and not env_copy.only_warmup_missing(problems):
        mf.raise_on_mismatch(
            problems,
            f"version {version} is live in '{env}' but its files changed",
            store.fs.path(store.model_rel(env, model), str(version)),
            "promote another version, then promote this one again to rewrite the copy",
        )
    cfg, variant_name = store.release_config(model, version, variant_of(state.history, version))
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
        return _rollback_locked(store, env, model, reload_url, public_key, git_repo, guard)


def _rollback_locked(
    store: ReleaseStore,
    env: str,
    model: str,
    reload_url: str | list[str] | None,
    public_key: str | None,
    git_repo: str | None,
    guard: Lease | Any,
) -> SwitchResult:
    state = store.env_state(env, model)
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
    target = stack[-2]
    return switch(store, env, model, target, state, "rollback", variant_of(state.history, target), reload_url, public_key, git_repo, {"rolled_back": state.live}, guard)


def verify_store(store: ReleaseStore, model: str | None = None, public_key: str | None = None) -> list[str]:  # noqa: C901, PLR0912
    """Check every release, and every environment's pointer and version copies; returns lines of what was checked.

    Raises:
        ReleaseError: one message listing every problem found.
    """
    models = [store.resolve_model(model)] if model else store.models()
    checked, problems = [], []
    for mdl in models:
        manifests = {}
        for v in store.versions(mdl):
            try:
                manifests[v], bad = store.check_release(mdl, v)
                problems += [f"release {mdl} {v}: {b}" for b in bad]
                if public_key or store.public_key or store.require_signature:
                    store.check_signature(mdl, v, public_key)
                elif store.fs.exists(f"{store.release_rel(mdl, v)}/{signing.SIGNATURE}"):
                    problems += [f"release {mdl} {v}: {b}" for b in signing.unkeyed_problems(store.fs, store.release_rel(mdl, v), manifests[v])]
            except ReleaseError as e:
                problems.append(f"release {mdl} {v}: {e.what}" + "".join(f"; {k}: {val}" for k, val in e.details.items()))
                continue
            if not bad:
                checked.append(f"release {mdl} {v}: ok ({len(manifests[v]['files'])} files)")
        if store.fs.s3 is not None:
            checked += [f"release {mdl} {u.version}: {u.describe(store.lock_lease_s)}" for u in publish.unfinished(store, mdl)]
        for env in store.environments:
            try:
                st = store.env_state(env, mdl)
            except ReleaseError as e:
                problems.append(f"env {env}: {e.what}")
                continue
            if st.live is None and not st.present:
                continue
            if st.live is not None and st.live not in manifests:
                problems.append(
                    f"env {env}: pointer names version {st.live}, which is not a release in the store"
                    f" (fix: `release promote --to {env} --version <N>` with one of {sorted(manifests)})"
                )
            elif st.live is not None and st.live not in st.present:
                problems.append(f"env {env}: pointer names version {st.live} but envs/{env}/{mdl}/{st.live}/ is missing")
            for v in st.present:
                if v not in manifests:
                    problems.append(f"env {env}: version {v} has no release manifest to check against")
                    continue
                bad = store.verify_env_copy(env, mdl, v, manifests[v])
                if bad:
                    hint = (
                        (
                            " (bytecode caches written by the python-backend stub; a planted .pyc would run at the next load, so they count:"
                            " promote/rollback remove them from versions that are not live)"
                        )
                        if any("__pycache__/" in b.path for b in bad)
                        else ""
                    )
                    if env_copy.only_warmup_missing(bad):
                        hint = f" (copied before environments carried warmup data: `release promote --to {env} --version {v}` adds them)"
                    problems.append(f"env {env}: copy of version {v} differs from its release: " + "; ".join(map(str, bad)) + hint)
            if st.live is not None:
                problems += _pointer_warmup(store, env, mdl, st.live)
            problems += verify_env.served_problems(store, env, mdl, st, manifests)
            checked += verify_env.interrupted_note(env, st)
            checked.append(f"env {env}: live {st.live}, present {st.present}")
        stale = verify_env.leftovers(store, mdl, store.lock_lease_s)
        problems += [f"leftover {rel} of a killed copy (fix: `release gc` removes it)" for rel in stale]
    for env in store.environments:
        problems += verify_env.stray_problems(store, env, store.models())
    if problems:
        raise ReleaseError(
            f"release store {store.url} failed verification ({len(problems)} problem(s))",
            fix="do not promote from it until fixed; see each problem",
            details={"problems": "\n    " + "\n    ".join(problems)},
        )
    return checked


def _pointer_warmup(store: ReleaseStore, env: str, model: str, live: int) -> list[str]:
    """A problem when the pointer's model_warmup names files the environment lacks: Triton fails to load the model then."""
    rel = f"{store.model_rel(env, model)}/config.pbtxt"
    missing = env_copy.missing_warmup(store, env, model, pointer.parse_config(store.fs.read_text(rel), store.fs.path(rel)))
    if not missing:
        return []
    return [
        f"env {env}: config.pbtxt's model_warmup names {', '.join(missing)}, which the environment does not hold, so Triton cannot load it"
        f" (fix: `release promote --to {env} --version {live}` installs version {live}'s warmup rows and points the config at them)"
    ]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
