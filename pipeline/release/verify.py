"""What ``release verify`` checks in an environment beyond the version copies: what Triton would serve.

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
from typing import Any

from pipeline.release import pointer
from pipeline.release.history import live_stack, variant_of
from pipeline.release.store import EnvState, ReleaseStore

STAGING = ".staging-"


def served_problems(store: ReleaseStore, env: str, model: str, st: EnvState, manifests: dict[int, dict[str, Any]]) -> list[str]:
    """Problems with what ``env`` serves for ``model`` (its pointer, history and directory)."""
    rel = store.model_rel(env, model)
    fix = f"`release promote --to {env} --version {st.live}` rewrites it from the release"
    out = []
    if st.live is not None and st.live in manifests:
        variant = variant_of(st.history, st.live)
        try:
            cfg, name = store.release_config(model, st.live, variant)
            if store.fs.read_bytes(f"{rel}/config.pbtxt") != pointer.render(cfg, env, model, st.live, name):
                out.append(f"env {env}: config.pbtxt is not the config release {st.live} renders (variant {name}): edited by hand? (fix: {fix})")
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
