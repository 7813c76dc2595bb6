"""Promote or roll back a model and its companions (text endpoint, TensorRT model) as one set.

A text endpoint calls its tensor model through Triton (BLS). In an environment its config names the tensor
version it calls (``tensor_version``, :func:`pointer.pinned`), so it never answers with a model it was not switched
with. A set switch of ``env`` from (model a, endpoint x) to (b, y) keeps every moment a consistent set:

1. under every member's lock, every target is checked (checksums, signature, evidence, variant) before anything
   changes: a refusal of any member leaves the whole environment as it was;
2. the model switches to b while still serving a: its pointer names [a, b] (with ``--reload`` each server loads b
   beside a); x, which calls a, keeps answering;
3. each companion switches as ``release promote`` does (y calls b);
4. the model's pointer settles on [b] (with ``--reload`` each server unloads a).

A fleet server that loads the environment at any point gets endpoints whose pinned version is served. If a
companion's switch fails after step 2, the model is switched back to a (recorded as a rollback) and the error is
raised; a failure of step 4 leaves a served beside b and names the step to retry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from pipeline.core.errors import ReleaseError
from pipeline.release.promote import (
    Switch,
    SwitchOptions,
    SwitchResult,
    check_target,
    retire_old,
    rollback_target,
    default_version,
    promote,
    switch,
)
from pipeline.release.store import faults, pointer
from pipeline.release.store.history import HistoryEvent, live_stack, variant_of
from pipeline.release.store.lock import HeldLock
from pipeline.release.store.store import EnvState, ReleaseStore
from pipeline.release.triton_control import TritonReloader

# (member, its state read under the lock) -> the version it switches to, and the history event's extra keys
Target = Callable[[str, EnvState], tuple[int, HistoryEvent]]


def promote_set(store: ReleaseStore, env: str, names: list[str], version: int | None, variant: str | None, opts: SwitchOptions, follow: bool = False) -> list[SwitchResult]:
    """Promote release ``version`` of ``names[0]`` (default: as :func:`promote` chooses) with each companion in
    ``names[1:]`` at its release built from the same commit; with ``follow`` (the model switched alone), each
    companion live in ``env`` stays at its version and calls the model's new one.

    Raises:
        ReleaseError: a companion has no release from that commit, or any member is refused (nothing changed then).
    """
    store.check_env(env)
    base = names[0]
    notes = []
    if version is None:
        version, why = default_version(store, base, env)
        notes.append(f"version {version} chosen: {why}")
    if follow:
        names = [base, *(n for n in names[1:] if store.env_state(env, n).live is not None)]
        targets = {base: version, **{n: int(store.env_state(env, n).live or 0) for n in names[1:]}}
    else:
        targets = {base: version, **{n: store.built_with(n, base, version) for n in names[1:]}}
    res = _switch_set(store, env, names, "promote", lambda n, _state: (targets[n], HistoryEvent()), variant, opts)
    res[0].notes = notes + res[0].notes
    return res


def rollback_set(store: ReleaseStore, env: str, names: list[str], opts: SwitchOptions, follow: bool = False) -> list[SwitchResult]:
    """Roll every member of the set back to the version live before its current one; with ``follow`` (the model
    rolled back alone), the companions stay and call the model's earlier version.

    Raises:
        ReleaseError: as :func:`pipeline.release.promote.rollback` for any member (nothing changed then).
    """
    store.check_env(env)
    names = [names[0], *(n for n in names[1:] if store.env_state(env, n).live is not None)]  # companions it serves

    def target(name: str, state: EnvState) -> tuple[int, HistoryEvent]:
        if name != names[0] and state.live is not None and (follow or len(live_stack(state.history)) < 2):
            return state.live, HistoryEvent()  # a companion with no earlier version stays, calling what the model will serve
        live, previous = rollback_target(store, env, state)
        return previous, HistoryEvent(rolled_back=live)

    return _switch_set(store, env, names, "rollback", target, None, opts)


def _switch_set(store: ReleaseStore, env: str, names: list[str], action: str, target: Target, variant: str | None, opts: SwitchOptions) -> list[SwitchResult]:
    """Steps 1-4 of the module docstring. A companion already live at its target switches only to call the model's
    new version (a re-pin); any other member already live goes through :func:`promote` after (a repair or a no-op)."""
    base = names[0]
    results: list[SwitchResult] = []
    already: list[tuple[str, int]] = []
    with contextlib.ExitStack() as locks:
        guards = {n: locks.enter_context(store.env_lock(env, n, f"{action} the set of {base} in {env}")) for n in names}
        plan: list[Switch] = []
        calls = None
        for n in names:
            state = store.env_state(env, n)
            version, event = target(n, state)
            if n == base:
                calls = version
            chosen = variant if action == "promote" else variant_of(state.history, version)
            sw = Switch(env, n, version, action, state, chosen, event, pin=None if n == base else calls)
            if state.live == version and not _repins(store, sw):
                already.append((n, version))
            else:
                plan.append(Switch(env, n, version, "promote", state, chosen, event, pin=sw.pin) if state.live == version else sw)
        if plan:
            results = run_plan(store, plan, base, opts, guards)
    for n, version in already:
        results.append(promote(store, env, n, version, variant, list(opts.reload), opts.public_key, opts.git_repo))
    return results


def callee(store: ReleaseStore, model: str, version: int) -> list[str]:
    """The model release ``version`` of ``model`` calls (a text endpoint's), if the store holds it: [] or [its name]."""
    tensor = pointer.calls(store.release_config(model, version, None)[0]) if store.is_release(model, version) else None
    return [tensor] if tensor is not None and tensor in store.models() else []


def followers(store: ReleaseStore, env: str, model: str) -> list[str]:
    """The models ``env`` serves that call ``model`` (its text endpoint): they must call its new version when it switches."""
    out = []
    for m in store.models():
        served = store.served_config(env, m) if m != model else None
        if served is not None and pointer.calls(served) == model:
            out.append(m)
    return out


def switch_followed(store: ReleaseStore, sw: Switch, opts: SwitchOptions, guards: dict[str, HeldLock]) -> list[SwitchResult]:
    """Switch ``sw``'s model (its lock and each follower's in ``guards``) as a set whose followers keep their
    versions and call the model's new one (what a canary of the model does on a pass)."""
    if len(guards) == 1:
        return [switch(store, sw, opts, guards[sw.model])]
    plan = [sw]
    for m in guards:
        if m != sw.model:
            state = store.env_state(sw.env, m)
            assert state.live is not None  # a follower is served (followers())
            plan.append(Switch(sw.env, m, state.live, "promote", state, variant_of(state.history, state.live), pin=sw.target))
    return run_plan(store, plan, sw.model, opts, guards)


def _repins(store: ReleaseStore, sw: Switch) -> bool:
    """Whether ``sw``'s member, live at its target, is a text endpoint that must call another version of the model."""
    if sw.pin is None or sw.state.live is None:
        return False
    cfg, _ = store.release_config(sw.model, sw.target, sw.variant)
    if pointer.calls(cfg) is None:
        return False
    served = store.served_config(sw.env, sw.model)
    return served is None or pointer.pin_of(served) != sw.pin


def run_plan(store: ReleaseStore, plan: list[Switch], base: str, opts: SwitchOptions, guards: dict[str, HeldLock]) -> list[SwitchResult]:
    """Check every switch of ``plan``, then switch the model (keeping its old version served), the companions, and
    settle the model."""
    for sw in plan:  # step 1: nothing changes unless every member can switch
        check_target(store, sw, opts)
    first = plan[0]
    keep = first.state.live if first.model == base and first.state.live not in (None, first.target) else None
    if keep is not None:
        plan[0] = Switch(first.env, first.model, first.target, first.action, first.state, first.variant, first.event, keep=keep)
    results = [switch(store, plan[0], opts, guards[plan[0].model])]
    try:
        faults.point("between_set_members")
        for sw in plan[1:]:
            results.append(switch(store, sw, opts, guards[sw.model]))
            results[-1].repin = sw.state.live == sw.target
    except BaseException as e:
        if keep is not None:
            _undo(store, plan[0], opts, guards[base], e)
        raise
    if keep is not None:
        results[0].retry += _settle(store, plan[0], opts, guards[base])
    return results


def _undo(store: ReleaseStore, sw: Switch, opts: SwitchOptions, guard: HeldLock, why: BaseException) -> None:
    """A companion could not switch: put the model back on the version it served (a rollback in its history)."""
    assert sw.keep is not None
    reason = getattr(why, "what", None) or f"{type(why).__name__}: {why}"
    back = Switch(
        sw.env,
        sw.model,
        sw.keep,
        "rollback",
        store.env_state(sw.env, sw.model),
        variant_of(sw.state.history, sw.keep),
        HistoryEvent(rolled_back=sw.target, note=f"the set's switch failed: {reason}"),
    )
    try:
        switch(store, back, opts, guard)
    except ReleaseError as e:
        raise ReleaseError(
            f"the set's switch failed ({reason}), and '{sw.model}' could not be switched back to version {sw.keep}: {e.what}",
            fix=f"`release rollback --env {sw.env} --model {sw.model}`",
        ) from None


def _settle(store: ReleaseStore, sw: Switch, opts: SwitchOptions, guard: HeldLock) -> list[str]:
    """Step 4: the model's pointer names the new version alone, and each server unloads the old one. The switch
    stands either way: a failure is returned as the step to retry."""
    cfg, variant_name = store.release_config(sw.model, sw.target, sw.variant)
    try:
        guard.check()
        store.flip(sw.env, sw.model, pointer.render(cfg, sw.env, sw.model, sw.target, variant_name), store.env_state(sw.env, sw.model).pointer_tag)
    except ReleaseError as e:
        return [f"{e.what}: version {sw.keep} is still served beside {sw.target} (fix: `release promote --to {sw.env} --version {sw.target} --model {sw.model}`)"]
    reloaders = [TritonReloader(u, sw.model) for u in opts.reload]
    try:
        return retire_old(reloaders, sw, cfg)
    finally:
        for r in reloaders:
            r.close()
