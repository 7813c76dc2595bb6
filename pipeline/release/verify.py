"""``release verify`` and ``release gc``: every release re-hashed, and every environment checked against its releases.

Beyond each release's files and each environment's version copies, it checks what Triton would serve:

- the pointer (``config.pbtxt``) byte for byte against the config its release renders;
- symlinks anywhere in the environment (a local store's files must be its own);
- models and files that no release put there (a server not in explicit mode loads every model directory);
- a missing or truncated promotion history, and an intent whose flip never came;
- ``.staging-*`` leftovers of killed copies, which ``release gc`` collects.
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.core.errors import ReleaseError
from pipeline.records.release import ReleaseManifest
from pipeline.release.store import env_copy, pointer, publish, signing
from pipeline.release.store.history import live_stack, variant_of
from pipeline.release.store.store import EnvState, ReleaseStore

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

STAGING = ".staging-"


@dataclass
class _Findings:
    """What ``release verify`` found so far: lines of what checked out, and every problem."""

    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def verify_store(store: ReleaseStore, model: str | None = None, public_key: str | None = None) -> list[str]:
    """Check every release, and every environment's pointer and version copies; returns lines of what was checked.

    Raises:
        ReleaseError: one message listing every problem found.
    """
    found = _Findings()
    for mdl in [store.resolve_model(model)] if model else store.models():
        manifests = {v: m for v in store.versions(mdl) if (m := _check_release(store, mdl, v, public_key, found)) is not None}
        if store.fs.s3 is not None:
            found.checked += [f"release {mdl} {u.version}: {u.describe(store.lock_lease_s)}" for u in publish.unfinished(store, mdl)]
        for env in store.environments:
            _check_env(store, env, mdl, manifests, found)
        found.problems += [f"leftover {rel} of a killed copy (fix: `release gc` removes it)" for rel in leftovers(store, mdl, store.lock_lease_s)]
    for env in store.environments:
        found.problems += stray_problems(store, env, store.models())
    if found.problems:
        raise ReleaseError(
            f"release store {store.url} failed verification ({len(found.problems)} problem(s))",
            fix="do not promote from it until fixed; see each problem",
            details={"problems": "\n    " + "\n    ".join(found.problems)},
        )
    return found.checked


def _check_release(store: ReleaseStore, model: str, version: int, public_key: str | None, found: _Findings) -> ReleaseManifest | None:
    """One release's files, self-consistency and signature; its manifest (None: the manifest cannot be read).

    A release whose signature fails keeps its manifest here: its environments' copies are still checked against it.
    """
    where = f"release {model} {version}"
    try:
        m, bad = store.check_release(model, version)
    except ReleaseError as e:
        found.problems.append(_failed(where, e))
        return None
    found.problems += [f"{where}: {b}" for b in bad]
    try:
        if public_key or store.public_key or store.require_signature:
            store.check_signature(model, version, public_key)
        elif store.fs.exists(f"{store.release_rel(model, version)}/{signing.SIGNATURE}"):
            found.problems += [f"{where}: {b}" for b in signing.unkeyed_problems(store.fs, store.release_rel(model, version), m)]
    except ReleaseError as e:
        found.problems.append(_failed(where, e))
        return m
    if not bad:
        found.checked.append(f"{where}: ok ({len(m.files)} files)")
    return m


def _failed(where: str, e: ReleaseError) -> str:
    return f"{where}: {e.what}" + "".join(f"; {k}: {val}" for k, val in e.details.items())


def _check_env(store: ReleaseStore, env: str, model: str, manifests: dict[int, ReleaseManifest], found: _Findings) -> None:
    """One environment's pointer, version copies, warmup rows, history and served config."""
    try:
        st = store.env_state(env, model)
    except ReleaseError as e:
        found.problems.append(f"env {env}: {e.what}")
        return
    if st.live is None and not st.present:
        return
    if st.live is not None and st.live not in manifests:
        found.problems.append(
            f"env {env}: pointer names version {st.live}, which is not a release in the store (fix: `release promote --to {env} --version <N>` with one of {sorted(manifests)})"
        )
    elif st.live is not None and st.live not in st.present:
        found.problems.append(f"env {env}: pointer names version {st.live} but envs/{env}/{model}/{st.live}/ is missing")
    found.problems += copy_problems(store, env, model, st, manifests)
    if st.live is not None:
        found.problems += _pointer_warmup(store, env, model, st.live)
    found.problems += served_problems(store, env, model, st, manifests)
    found.checked += interrupted_note(env, st)
    found.checked.append(f"env {env}: live {st.live}, present {st.present}")


def copy_problems(store: ReleaseStore, env: str, model: str, st: EnvState, manifests: dict[int, ReleaseManifest]) -> list[str]:
    """Each version copy of ``env`` that differs from its release, with a hint when the cause is known."""
    out = []
    for v in st.present:
        if v not in manifests:
            out.append(f"env {env}: version {v} has no release manifest to check against")
            continue
        bad = store.verify_env_copy(env, model, v, manifests[v])
        if not bad:
            continue
        hint = ""
        if env_copy.only_warmup_missing(bad):
            hint = f" (copied before environments carried warmup data: `release promote --to {env} --version {v}` adds them)"
        elif any("__pycache__/" in b.path for b in bad):
            hint = (
                " (bytecode caches written by the python-backend stub; a planted .pyc would run at the next load, so they count:"
                " promote/rollback remove them from versions that are not live)"
            )
        out.append(f"env {env}: copy of version {v} differs from its release: " + "; ".join(map(str, bad)) + hint)
    return out


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


def _set_problems(store: ReleaseStore, env: str, model: str, cfg: mc.ModelConfig) -> list[str]:
    """A text endpoint must call a version of its tensor model that ``env`` serves: the set a fleet server loads."""
    tensor, pin = pointer.calls(cfg), pointer.pin_of(cfg)
    if tensor is None or pin is None:
        return []
    tensor_cfg = store.served_config(env, tensor)
    served = pointer.live_versions(tensor_cfg) if tensor_cfg is not None else []
    if pin in served:
        return []
    return [
        f"env {env}: '{model}' calls version {pin} of '{tensor}', which '{env}' serves {served or 'no version'} of: not one set"
        f" (fix: `release promote --to {env}` without --model switches them together)"
    ]


def served_problems(store: ReleaseStore, env: str, model: str, st: EnvState, manifests: dict[int, ReleaseManifest]) -> list[str]:
    """Problems with what ``env`` serves for ``model`` (its pointer, history and directory)."""
    rel = store.model_rel(env, model)
    fix = f"`release promote --to {env} --version {st.live}` rewrites it from the release"
    out = []
    if st.live is not None and st.live in manifests:
        variant = variant_of(st.history, st.live)
        try:
            cfg, name = store.release_config(model, st.live, variant)
            served = store.fs.read_bytes(f"{rel}/config.pbtxt")
            cfg = pointer.pinned(cfg, pointer.pin_of(pointer.parse_config(served.decode("utf-8"), "the pointer")))
            if served != pointer.render(cfg, env, model, st.live, name):
                out.append(f"env {env}: config.pbtxt is not the config release {st.live} renders (variant {name}): edited by hand? (fix: {fix})")
            out += _set_problems(store, env, model, cfg)
        except Exception as e:  # noqa: BLE001 - a variant the release lacks is reported, not raised
            out.append(f"env {env}: cannot render release {st.live}'s config (variant {variant or 'default'}): {getattr(e, 'what', e)}")
    if st.live is not None:
        stack = live_stack(st.history)
        if not st.history:
            out.append(f"env {env}: the promotion history is missing, but the pointer names version {st.live} (fix: `release promote --to {env} --version {st.live}` records it)")
        elif not stack or stack[-1] != st.live:
            out.append(
                f"env {env}: the pointer names version {st.live} but the history ends at {stack[-1] if stack else '(nothing)'}"
                f" (fix: `release promote --to {env} --version {st.live}` records it)"
            )
    return out


def interrupted_note(env: str, st: EnvState) -> list[str]:
    """A line for an intent that never flipped (harmless: readers take it as aborted)."""
    if st.interrupted is None:
        return []
    e = st.interrupted
    return [f"env {env}: an interrupted {e.get('action')} to version {e.get('version')} ({e.get('at')}) never flipped the pointer: recorded as aborted"]


def stray_problems(store: ReleaseStore, env: str, models: list[str]) -> list[str]:
    """Entries of ``envs/<env>/`` no release put there, and symlinks (local stores)."""
    out = []
    root = f"envs/{env}"
    for name in store.fs.listdir(root):
        if name not in models:
            out.append(f"env {env}: {root}/{name} is no model of this store (a server not in explicit mode would load it): remove it")
            continue
        for entry in store.fs.listdir(f"{root}/{name}"):
            if not (entry == "config.pbtxt" or entry.isdigit() or entry == "warmup" or entry.startswith(STAGING)):
                out.append(f"env {env}: {root}/{name}/{entry} was not put there by a release: remove it")
    if store.fs.local:
        base = store.fs.path(root)
        for d, dirs, files in os.walk(base):
            for n in dirs + files:
                p = os.path.join(d, n)
                if os.path.islink(p):
                    out.append(
                        f"env {env}: {os.path.relpath(p, store.fs.path())} is a symlink (to {os.readlink(p)}): an environment holds only copies;"
                        f" fix: `release promote --to {env} --version <live>` replaces it"
                    )
    return out


def leftovers(store: ReleaseStore, model: str, older_than_s: float) -> list[str]:
    """``.staging-*`` directories (store-relative) under the releases and environments of ``model``, older than ``older_than_s``."""
    if not store.fs.local:
        return []  # object stores upload to final keys: nothing is staged under another name
    parents = [f"releases/{model}"] + [f"{store.model_rel(env, model)}{sub}" for env in store.environments for sub in ("", "/warmup")]
    now, found = time.time(), []
    for parent in parents:
        for n in store.fs.listdir(parent):
            full = store.fs.path(parent, n)
            if n.startswith(STAGING) and now - os.lstat(full).st_mtime > older_than_s:
                found.append(posixpath.join(parent, n))
    return found


RELEASE_STAGING_AGE_S = 3600.0  # a local build's staging directory younger than this may still be uploading


def gc(store: ReleaseStore, model: str) -> list[str]:
    """Remove leftovers: an environment's under its lock (no switch is copying then), a release's once an hour old."""
    removed = []
    for rel in leftovers(store, model, 0.0):
        if rel.startswith("envs/"):
            with store.env_lock(rel.split("/")[1], model, f"gc of {model}"):
                store.fs.remove_tree(rel)
        elif time.time() - os.lstat(store.fs.path(rel)).st_mtime > RELEASE_STAGING_AGE_S:
            store.fs.remove_tree(rel)
        else:
            continue
        removed.append(rel)
    return removed
