"""``release build``: freeze the repository stage's output into the next immutable release.

Every check runs before the store is touched (:func:`plan_release`): Triton parses each
config; DVC sees the pipeline up to date (:mod:`pipeline.release.dvc_check`); the parity
report passed and covers the served files by sha256 (:mod:`pipeline.release.evidence`); and,
with tagging on, GTO will accept the version tag. Only then is the release written
(:func:`publish_release`). The CLI plans every model of a repository before publishing any,
so ``<name>`` and ``<name>_trt`` are released together or not at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.errors import ReleaseError
from pipeline.release import dvc_check, evidence, gto_tags, pointer, signing
from pipeline.release import manifest as mf
from pipeline.release.store import ReleaseStore
from pipeline.repository.warmup import WARMUP_DIR


@dataclass
class BuildResult:
    """What ``release build`` produced."""

    model: str
    version: int
    manifest: dict[str, Any]
    tag: gto_tags.TagResult
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass
class ReleasePlan:
    """A release that passed every check and is ready to be written."""

    model_dir: Path
    sections: dict[str, Any]
    tag: bool
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    samples: Path | None = None  # the parity stage's inputs, shipped as files/samples/inputs.json


def find_model_dir(repository: str | Path, model: str | None = None) -> Path:
    """The model directory inside a Triton repository (or the path itself if it is one).

    Raises:
        ReleaseError: the path does not exist, or holds no / several models and none was named.
    """
    repo = Path(repository)
    if (repo / "config.pbtxt").is_file():
        return repo
    if not repo.is_dir():
        raise ReleaseError(f"model repository not found: {repo}", fix="run `dvc repro` so the repository stage writes it, or pass --repository")
    models = sorted(p for p in repo.iterdir() if (p / "config.pbtxt").is_file())
    if model:
        chosen = [p for p in models if p.name == model]
        if chosen:
            return chosen[0]
    elif len(models) == 1:
        return models[0]
    raise ReleaseError(
        f"cannot tell which model of {repo} to release",
        fix="pass --model <name>" if models else "run `dvc repro` so the repository stage writes a model",
        details={"models found": ", ".join(p.name for p in models) or "(none)", "asked for": model or "(any)"},
    )


def model_names(repository: str | Path) -> list[str]:
    """Every model directory (one with a config.pbtxt) in a Triton repository, or the model dir itself."""
    repo = Path(repository)
    if (repo / "config.pbtxt").is_file():
        return [repo.name]
    if not repo.is_dir():
        raise ReleaseError(f"model repository not found: {repo}", fix="run `dvc repro` so the repository stage writes it, or pass --repository")
    return sorted(p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file())


def version_dir(model_dir: Path) -> Path:
    """The one numbered version directory of a model dir.

    Raises:
        ReleaseError: none or several.
    """
    found = sorted(p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if len(found) != 1:
        raise ReleaseError(
            f"the repository {model_dir} must hold exactly one numbered version directory, found {[p.name for p in found] or 'none'}",
            fix="re-run the repository stage (`dvc repro repository`), which writes one version",
        )
    return found[0]


def _check_warmup_files(model_dir: Path, where: Path, cfg: Any) -> None:
    """Every model_warmup file a config names is in ``<model>/warmup/`` (Triton refuses to load the model otherwise).

    Raises:
        ReleaseError: naming the config and the missing files.
    """
    named = sorted({i.input_data_file for s in cfg.model_warmup for i in s.inputs.values() if i.WhichOneof("input_data_type") == "input_data_file"})
    missing = [n for n in named if not (model_dir / WARMUP_DIR / n).is_file()]
    if missing:
        raise ReleaseError(
            f"{where} has a model_warmup whose data files are not in {model_dir / WARMUP_DIR}, so Triton could not load it",
            fix="re-run the repository stage (`dvc repro repository`), which writes the warmup rows beside the configs",
            details={"missing": ", ".join(f"{WARMUP_DIR}/{n}" for n in missing)},
        )


def plan_release(  # noqa: PLR0913
    store: ReleaseStore,
    repository: str | Path,
    parity: str | Path,
    bench: str | Path | None = None,
    dvc_lock: str | Path = "dvc.lock",
    model: str | None = None,
    git_cwd: str | Path = ".",
    tag: bool = True,
    dvc: dict[str, Any] | None = None,
    unchecked_evidence: bool = False,
) -> ReleasePlan:
    """Run every check of a release of ``repository`` without writing anything.

    ``dvc`` is a :func:`pipeline.release.dvc_check.check` result computed once for several
    models of one repository (None: check here, with ``unchecked_evidence`` as
    ``release build --unchecked-evidence`` passes it).

    Raises:
        ReleaseError: a config Triton cannot parse; the DVC pipeline is stale; parity is
        missing, failed or vouches for other files; the evidence is not the DVC outputs dvc.lock
        records (without ``unchecked_evidence``); dvc.lock is missing; with ``tag``, GTO
        would refuse the version tag (e.g. this commit already carries a version).
    """
    t0 = time.perf_counter()
    model_dir = find_model_dir(repository, model)
    vdir = version_dir(model_dir)
    parsed = []
    for cfg in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))]:
        # Triton's schema, before anything is written.
        fix = "re-run the repository stage (`dvc repro repository`), which renders configs from Triton's schema"
        parsed.append(pointer.parse_config(cfg.read_text(encoding="utf-8"), str(cfg), fix=fix))
        _check_warmup_files(model_dir, cfg, parsed[-1])
    dvc_state = dvc if dvc is not None else dvc_check.check(repository, parity, bench, unchecked_evidence)
    outputs = [o.name for o in parsed[0].output]
    sections = {
        "git": mf.git_info(git_cwd),
        "dvc": dvc_state,
        "dvc_lock": mf.dvc_lock_hashes(dvc_lock),
        "parity": evidence.parity_section(parity, vdir, outputs),
        "bench": (
            {"status": "absent", "reason": dvc_state["bench_detached"]} if dvc_state.get("bench_detached") else evidence.bench_section(bench, model_dir.name, model_dir, vdir)
        ),
        "environment": mf.environment(),
        "gto": {"artifact": gto_tags.gto_name(model_dir.name)},
    }
    samples, sections["samples"] = evidence.parity_samples(parity)
    notes = []
    if not dvc_state.get("checked"):
        notes.append(f"UNCHECKED EVIDENCE (--unchecked-evidence): {dvc_state.get('reason')}")
    if sections["git"]["dirty"]:
        notes.append("the git work tree has uncommitted changes: the recorded commit does not fully describe this release")
    if sections["bench"]["status"] != "measured":
        notes.append(f"no bench summary: {sections['bench']['reason']}")
    if samples is None:
        notes.append(f"no samples for `release canary` to replay: {sections['samples']['reason']}")
    if tag:
        versions = store.versions(model_dir.name)
        gto_tags.check_register(sections["git"]["toplevel"], model_dir.name, (versions[-1] + 1) if versions else 1, sections["git"]["commit"])
    return ReleasePlan(model_dir, sections, tag, notes, t0, samples)


def publish_release(store: ReleaseStore, plan: ReleasePlan, sign_key: str | Path | None = None) -> BuildResult:
    """Write release N+1 of a checked plan (and its signature, and its git tag).

    Raises:
        ReleaseError: store not writable, signing failed (nothing is published then), or
        git refused the tag after the release was published (the message says how to tag it).
    """
    sign = None
    if sign_key is not None:
        key = sign_key

        def sign(local_release: Path) -> None:
            signing.sign_path(local_release, key)

    name, git = plan.model_dir.name, plan.sections["git"]
    extra = [(plan.samples, evidence.SAMPLES_FILE)] if plan.samples is not None else []
    version, manifest = store.add_release(name, plan.model_dir, plan.sections, sign=sign, extra=extra)
    tag_result = gto_tags.TagResult(None, "disabled (--no-tag)")
    if plan.tag:
        # The tag carries the manifest's digest, so git also pins what this release contained.
        digest, _ = store.fs.sha256(f"{store.release_rel(name, version)}/manifest.json")
        tag_result = gto_tags.register(git["toplevel"], name, version, git["commit"], f"release {version} of {name}; manifest sha256 {digest}; store {store.url}")
    return BuildResult(name, version, manifest, tag_result, time.perf_counter() - plan.started, plan.notes)


def build_release(  # noqa: PLR0913
    store: ReleaseStore,
    repository: str | Path,
    parity: str | Path,
    bench: str | Path | None = None,
    dvc_lock: str | Path = "dvc.lock",
    model: str | None = None,
    git_cwd: str | Path = ".",
    sign_key: str | Path | None = None,
    tag: bool = True,
    dvc: dict[str, Any] | None = None,
    unchecked_evidence: bool = False,
) -> BuildResult:
    """Check (:func:`plan_release`), then write (:func:`publish_release`) the next release of one model.

    Raises:
        ReleaseError: see both; nothing is published when a check fails.
    """
    plan = plan_release(store, repository, parity, bench, dvc_lock, model, git_cwd, tag, dvc, unchecked_evidence)
    return publish_release(store, plan, sign_key)
