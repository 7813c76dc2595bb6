"""What the release commands print: a build's summary and a switch's outcome (kept out of cli.py, which holds the commands)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console


def print_build(out: Console, st: Any, res: Any, sign_key: Path | None) -> None:
    """The summary of one built release."""
    files, sections = res.manifest.files, res.sections
    size = sum(f.size for f in files.values())
    out.print(f"built release {res.model} version {res.version} in {res.seconds:.2f} s -> {st.fs.show(st.release_rel(res.model, res.version))}")
    out.print(f"  files: {len(files)} ({size / 1e6:.1f} MB), sha256 recorded for each")
    out.print(f"  git commit: {sections.git.commit or '(none)'}{' (dirty work tree)' if sections.git.dirty else ''}")
    dvc = sections.dvc
    if dvc.checked:
        bound = ", ".join(f"{k} = {v['stage']}" for k, v in (dvc.evidence or {}).items())
        out.print(f"  dvc: up to date ({', '.join(dvc.stages or [])}); evidence from dvc.lock: {bound}")
    else:
        out.print(f"  dvc: NOT CHECKED (--unchecked-evidence): {dvc.reason}")
    served = ", ".join(f"{f} = {s.artifact}" for f, s in sections.parity.served.items())
    out.print(f"  parity: passed ({served}); bench summary: {'recorded' if sections.bench.measured else 'absent'}")
    for kind, why in sections.parity.not_shipped.items():
        out.print(f"  not shipped (judged only on what it ships): {kind}: {why}")
    out.print(f"  signed: {'yes' if sign_key else 'no'}; git tag: {res.tag}")
    for n in res.notes:
        out.print(f"note: {n}")


def print_switch(out: Console, res: Any, tag: bool) -> None:
    """A promote/rollback outcome: notes, versions, timings, the tag, and any step to retry."""
    if not tag and res.tag is not None:
        res.tag.note, res.tag.tag = "--no-tag", None
    for n in res.notes:
        out.print(f"note: {n}")
    if res.action == "noop":
        return
    prev = "(none)" if res.previous is None else res.previous
    if getattr(res, "repin", False):  # a text endpoint that stays at its version and calls its model's new one
        out.print(f"re-pinned: {res.model} version {res.version} in '{res.env}' now calls the version of its model switched above")
    else:
        out.print(f"{res.action}: {res.model} version {prev} -> {res.version} in '{res.env}' ({res.copy})")
    out.print("wall time (s): " + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.3f}" for k, v in res.timings.items()))
    if res.tag is not None:
        out.print(f"git tag: {res.tag}" + (f" ({res.tag.note})" if res.tag.tag and res.tag.note != "assigned" else ""))
    for r in res.retry:  # the switch stands (exit 0); these steps after it must be redone
        out.print(f"warning: switched, but retry this step: {r}")
