"""Is the DVC pipeline behind a repository up to date? ``release build`` ships it only if so.

A clean git tree is not enough: a committed but unrun params change, or a checkpoint
rewritten in place, leaves the repository stage's output describing older inputs. The
check, with DVC's own API:

1. the stage whose out holds the repository (``repository``) and every stage it depends
   on transitively, from DVC's graph (no stage names here);
2. each of them against dvc.lock and params.yaml (``Repo.status``, one stage at a time),
   except
   - always-changed stages (the machine probe): DVC reports them changed by design; their
     source records are checked by content instead (3.);
   - stages that read a *machine* record (an always-changed stage's out that is neither a
     source record nor the host record): the per-GPU ``engine@*`` stages. The probe
     legitimately differs on the CPU machine that assembles a release from engines pulled
     from GPU runners; engines are guarded by their manifests and by the parity and
     repository stages, which depend on the engine files by content.
     The host record (``{"record": "host"}``: CPU, cores, memory, runtime versions) is not
     such a record: its readers upstream of the repository (``choose``, which times the
     precision candidates on this machine) run on the machine that assembles the release,
     whose probe wrote the record, so they are checked like any stage; a host record that
     differs from dvc.lock's means the choice was timed on another machine or runtime, and
     ``dvc repro`` times it again here;
3. the source records (``{"record": "model"|"data"}`` outs of an always-changed stage) are
   recomputed with :func:`pipeline.core.sources.records`, as the probe computes them, and
   compared byte for byte: a difference means a checkpoint, ONNX file or model module
   changed since the last ``dvc repro``, which no dvc.lock entry can show yet.

4. the evidence (:func:`bind`): the repository, the parity report and the bench report must
   each be the out of a stage of this project, byte for byte as dvc.lock records it. Parity's
   stage is upstream of the repository (checked in 2.); a bench whose stage is out of date is
   not attached (the release carries no bench summary then, and says why).

Evidence from anywhere else (a copy, a repository outside any DVC project, a test) is refused
unless the caller passes ``unchecked=True`` (``release build --unchecked-evidence``); the
manifest then says ``{"checked": false, "unchecked_evidence": true, "reason": ...}`` and
``promote`` refuses the release in production (``release.production_requires_checked_evidence``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.core.errors import ReleaseError
from pipeline.records.release import DvcCheck

REQUIRED_SOURCE_KINDS = ("model", "data")
SOURCE_KINDS = (*REQUIRED_SOURCE_KINDS, "tokenizer")  # the tokenizer record is optional: a probe stage without --tokenizer-record writes none
HOST_KIND = "host"  # pipeline.core.host's record: an ordinary dependency of the stages that read it

# Run in the project root with the project's interpreter, exactly like the probe stage
# (`python -m` puts the root first on sys.path, so factory modules resolve the same way).
_RECORDS = """\
import json, sys
from pathlib import Path
from pipeline.core.config import load_config
from pipeline.core.errors import PipelineError
from pipeline.core.sources import records
try:
    print(json.dumps(records(load_config(Path(sys.argv[1])).model, Path.cwd().resolve())))
except PipelineError as e:
    print(e.render(), file=sys.stderr)
    sys.exit(2)
"""


UNCHECKED_FIX = (
    "release the pipeline's own outputs: run `dvc repro`, then `release build` with the default --repository, --parity and"
    " --bench; or pass --unchecked-evidence to build from these files anyway (the manifest records it, and"
    " `release promote` refuses such a release in production unless --allow-unchecked-evidence)"
)


def check(repository: str | Path, parity: str | Path | None = None, bench: str | Path | None = None, unchecked: bool = False) -> DvcCheck:
    """The manifest's ``dvc`` section for ``repository`` and its evidence, or refuse when the pipeline is stale.

    Raises:
        ReleaseError: one message listing every stale stage with DVC's reason and the
        command that fixes it; or (without ``unchecked``) the repository, parity or bench is
        not a DVC out matching dvc.lock; or DVC cannot read the project or is locked by a
        running command; or the source records cannot be recomputed.
    """
    from dvc.exceptions import DvcException, NotDvcRepoError
    from dvc.lock import LockError
    from dvc.repo import Repo

    path = Path(repository).resolve()
    try:
        root = Path(Repo.find_root(str(path if path.is_dir() else path.parent)))
    except NotDvcRepoError:
        return _unchecked(f"{path} is not inside a DVC project: there is no dvc.lock to check it against", unchecked)
    try:
        with Repo(str(root)) as repo:
            state = _check(repo, root, path)
            state, problems = bind(repo, root, state, {"parity": parity, "bench": bench})
            return _unchecked("; ".join(problems), unchecked, state) if problems else state
    except LockError as e:
        raise ReleaseError(
            f"the DVC project {root} is locked by another dvc command",
            fix="wait until it finishes (a running `dvc repro`?), then build again",
            details={"error": e},
        ) from None
    except DvcException as e:
        raise ReleaseError(
            f"DVC cannot read the project {root}, so the release cannot be checked against dvc.lock",
            fix="run `dvc status` there and fix what it reports",
            details={"error": f"{type(e).__name__}: {e}"},
        ) from None


def _check(repo: Any, root: Path, path: Path) -> DvcCheck:
    import networkx as nx

    target = _target_stage(repo, root, path)
    graph = repo.index.graph  # edges point from a stage to the stages it depends on
    closure = graph.subgraph({target, *nx.descendants(graph, target)})
    order = list(reversed(list(nx.lexicographical_topological_sort(closure, key=lambda s: _name(s, root)))))
    always = [s for s in order if s.always_changed]
    records, machine, stale = _classify_outs(always, root)
    sources = _stale_sources(root, always, records) if not stale else []  # a missing out already says "run it"
    skipped = {
        _name(s, root): f"reads the machine record {', '.join(sorted(_rel(d, root) for d in _dep_paths(s) & machine))}; "
        "its engine is guarded by its manifest and by the parity and repository stages' content deps"
        for s in order
        if not s.always_changed and _dep_paths(s) & machine
    }
    checked = [s for s in order if not s.always_changed and _name(s, root) not in skipped]
    for s in checked:
        for entries in repo.status(targets=[s.addressing]).values():  # addressing: how DVC resolves it from the cwd
            stale.append((_name(s, root), describe(entries)))
    for name, why, record in sources:
        readers = [_name(s, root) for s in checked if record in _dep_paths(s)]
        stale.append((name, why + (f" ({', '.join(readers)} would rerun)" if readers else "")))
    fix_cmd = f"dvc repro {_name(target, root)}"
    if stale:
        raise ReleaseError(
            f"the DVC pipeline behind {_rel(path, root)} is out of date: {len(stale)} stage(s) changed since the last `dvc repro`, "
            "so the repository was not built from the inputs as they are now",
            fix=f"run `{fix_cmd}` (then commit dvc.lock) and build the release again",
            details={"project": root, "stale": "\n    " + "\n    ".join(f"{n}: {why}" for n, why in stale)},
        )
    return DvcCheck(
        checked=True,
        project=str(root),
        target=_name(target, root),
        stages=[_name(s, root) for s in checked],
        not_checked={**{_name(s, root): "always changed (its source records are compared by content)" for s in always}, **skipped},
        sources={kind: _rel(p, root) for kind, (_, p) in sorted(records.items())},
    )


def _unchecked(reason: str, allowed: bool, state: DvcCheck | None = None) -> DvcCheck:
    if not allowed:
        raise ReleaseError(f"the release's evidence is not vouched for by dvc.lock: {reason}", fix=UNCHECKED_FIX)
    return replace(state or DvcCheck(checked=False), checked=False, unchecked_evidence=True, reason=reason)


def bind(repo: Any, root: Path, state: DvcCheck, evidence: dict[str, str | Path | None]) -> tuple[DvcCheck, list[str]]:
    """``state`` with each evidence file bound to the stage out that holds it (its ``evidence``), and the problems found.

    An out must match its dvc.lock hash (DVC's own workspace check). Parity must come from a stage the
    repository depends on (so 2. checked it); a bench from a stage that is up to date, else it is not
    attached (``bench_detached`` says why) rather than refused: a bench is optional evidence.
    """
    problems: list[str] = []
    detached = None
    bound: dict[str, dict[str, str | None]] = {"repository": {"stage": state.target}}
    for kind, given in evidence.items():
        if given is None:
            continue
        p = Path(given).resolve()
        if kind == "bench" and not p.exists():
            continue  # no bench report: the manifest says "absent"
        found = _out_holding(repo, p)
        if found is None:
            problems.append(f"--{kind} {p} is not the output of any stage in {root}'s dvc.yaml")
            continue
        stage, out = found
        name, changed = _name(stage, root), out.workspace_status()
        if changed:
            problems.append(f"--{kind} {_rel(p, root)} ({name}'s out) differs from dvc.lock: {describe([changed])}")
        elif kind == "parity" and name not in (state.stages or []):
            problems.append(f"--parity {_rel(p, root)} is written by {name}, which the repository stage does not depend on")
        elif kind == "bench":
            stale = [describe(entries) for entries in repo.status(targets=[stage.addressing]).values()]
            if stale:
                detached = f"the {name} stage is out of date ({'; '.join(stale)}): run `dvc repro {name}`"
        bound[kind] = {"path": _rel(p, root), "stage": name, "md5": out.hash_info.value if out.hash_info else None}
    return replace(state, bench_detached=detached, evidence=bound), problems


def _out_holding(repo: Any, path: Path) -> tuple[Any, Any] | None:
    for stage in repo.index.stages:
        for out in stage.outs:
            o = Path(out.fs_path)
            if path == o or o in path.parents:
                return stage, out
    return None


def _target_stage(repo: Any, root: Path, path: Path) -> Any:
    """The stage whose out is ``path`` or a folder holding it."""
    found = _out_holding(repo, path)
    if found is not None:
        return found[0]
    raise ReleaseError(
        f"{path} is inside the DVC project {root}, but no stage writes it, so nothing says which inputs produced it",
        fix="release the repository stage's output (run `dvc repro repository`; --repository artifacts/model_repository)",
    )


def _dep_paths(stage: Any) -> set[Path]:
    return {Path(d.fs_path) for d in stage.deps if getattr(d, "fs_path", None)}


def _classify_outs(always: list[Any], root: Path) -> tuple[dict[str, tuple[Any, Path]], set[Path], list[tuple[str, str]]]:
    """Outs of always-changed stages: source records by kind, machine records (not the host record), and missing outs."""
    records: dict[str, tuple[Any, Path]] = {}
    machine: set[Path] = set()
    stale: list[tuple[str, str]] = []
    for stage in always:
        for out in stage.outs:
            p = Path(out.fs_path)
            try:
                data = json.loads(p.read_text(encoding="utf-8"))
            except FileNotFoundError:
                stale.append((_name(stage, root), f"its out {_rel(p, root)} is missing (the stage has not run here)"))
                continue
            except (OSError, ValueError):
                data = None
            kind = data.get("record") if isinstance(data, dict) else None
            if kind in SOURCE_KINDS:
                records[kind] = (stage, p)
            elif kind != HOST_KIND:
                machine.add(p)
    return records, machine, stale


def _stale_sources(root: Path, always: list[Any], records: dict[str, tuple[Any, Path]]) -> list[tuple[str, str, Path | None]]:
    """Recompute the source records; (stage, why, record path) for each whose files changed since the probe wrote it."""
    missing = [k for k in REQUIRED_SOURCE_KINDS if k not in records]
    if missing:
        names = ", ".join(_name(s, root) for s in always) or "(no always-changed stage)"
        return [
            (
                names,
                f"no out holds the {' and '.join(repr(k) for k in missing)} source record "
                '(JSON with "record": "model"|"data"), so a rewritten checkpoint, ONNX file or model module '
                "would go unnoticed (dvc.yaml: the probe stage writes them)",
                None,
            )
        ]
    from dvc.dependency.param import ParamsDependency

    stage = records["model"][0]
    params = next((Path(d.fs_path) for d in stage.deps if isinstance(d, ParamsDependency)), root / "params.yaml")
    now = recompute(root, params)
    out: list[tuple[str, str, Path | None]] = []
    for kind, (st, p) in sorted(records.items()):
        written = p.read_text(encoding="utf-8")
        if written != now.get(kind):
            why = f"source record {_rel(p, root)} no longer matches the files it fingerprints: {record_diff(written, now.get(kind, ''))}"
            out.append((_name(st, root), why, p))
    return out


def recompute(root: Path, params: Path) -> dict[str, str]:
    """The source records as the probe stage would write them now, computed in ``root``.

    Raises:
        ReleaseError: a file or module the model config names is missing (the message names the key).
    """
    r = subprocess.run([sys.executable, "-c", _RECORDS, str(params)], cwd=root, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise ReleaseError(
            "cannot fingerprint the model's source files to compare them with the probe's records",
            fix="fix the config key or file named below, then run `dvc repro repository`",
            details={"project": root, "error": (r.stderr.strip() or r.stdout.strip())[-1500:]},
        )
    return json.loads(r.stdout.strip().splitlines()[-1])


def record_diff(old: str, new: str, limit: int = 6) -> str:
    """What differs between two source records: changed, added and removed files, else the keys."""
    try:
        old_obj, new_obj = json.loads(old), json.loads(new)
    except ValueError:
        return "the record is not JSON"
    a, b = _leaves(old_obj), _leaves(new_obj)
    files_a, files_b = _files(old_obj), _files(new_obj)
    lines = [f"{p} changed (sha256 {files_a[p][:12]}... -> {files_b[p][:12]}...)" for p in sorted(files_a.keys() & files_b.keys()) if files_a[p] != files_b[p]]
    lines += [f"{p} is new" for p in sorted(files_b.keys() - files_a.keys())]
    lines += [f"{p} is gone" for p in sorted(files_a.keys() - files_b.keys())]
    if not lines:
        lines = [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    return "; ".join(lines[:limit]) + (f"; and {len(lines) - limit} more" if len(lines) > limit else "")


def _files(obj: Any) -> dict[str, str]:
    """Every ``{"path", "sha256"}`` entry anywhere in a record."""
    out: dict[str, str] = {}
    if isinstance(obj, dict):
        if isinstance(obj.get("path"), str) and isinstance(obj.get("sha256"), str):
            out[obj["path"]] = obj["sha256"]
        for v in obj.values():
            out.update(_files(v))
    elif isinstance(obj, list):
        for v in obj:
            out.update(_files(v))
    return out


def _leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in _leaves(val, f"{prefix}.{key}" if prefix else str(key)).items()}
    if isinstance(obj, list):
        return {k: v for i, val in enumerate(obj) for k, v in _leaves(val, f"{prefix}[{i}]").items()}
    return {prefix: obj}


def describe(entries: list[Any]) -> str:
    """DVC's status entries for one stage as one line: ``changed deps: params.yaml (variant modified)``."""
    parts = []
    for e in entries:
        if not isinstance(e, dict):
            parts.append(str(e))
            continue
        for kind, changes in e.items():
            if not isinstance(changes, dict):
                parts.append(f"{kind}: {changes}" if changes else str(kind))
                continue
            items = []
            for p, what in changes.items():
                if isinstance(what, dict):
                    what = ", ".join(f"{k} {v}" for k, v in what.items())
                items.append(f"{p} ({what})")
            parts.append(f"{kind}: " + "; ".join(items))
    return "; ".join(parts)


def _name(stage: Any, root: Path) -> str:
    """A stage's name as `dvc` run in ``root`` spells it (``addressing`` is relative to the cwd)."""
    dvcfile = Path(stage.path).resolve() if getattr(stage, "path", None) else root / "dvc.yaml"
    return stage.name if dvcfile == root / "dvc.yaml" else f"{_rel(dvcfile, root)}:{stage.name}"


def _rel(p: Path, root: Path) -> str:
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(p)
