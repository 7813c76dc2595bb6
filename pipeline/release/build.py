"""``release build``: freeze the repository stage's output into the next immutable release.

Every check runs before the store is touched (:func:`plan_release`): Triton parses each
config; DVC sees the pipeline up to date (:mod:`pipeline.release.evidence.dvc_check`); the parity
report passed and covers the served files by sha256 (:mod:`pipeline.release.evidence.reports`); and,
with tagging on, GTO will accept the version tag. Only then is the release written
(:func:`publish_release`). The CLI plans every model of a repository before publishing any,
so ``<name>`` and ``<name>_trt`` are released together or not at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import ReleaseError
from pipeline.records.release import BenchSection, DvcCheck, ReleaseManifest, ReleaseSections
from pipeline.release.evidence import dvc_check, provenance, reports, tags
from pipeline.release.store import pointer, signing
from pipeline.release.store.store import ReleaseStore
from pipeline.repository.warmup import WARMUP_DIR


@dataclass(frozen=True)
class BuildInputs:
    """The files a release is built from: the repository stage's output and the evidence that vouches for it."""

    repository: str | Path  # the repository stage's output, or one model directory in it
    parity: str | Path  # the parity report
    bench: str | Path | None = None  # the bench report (optional evidence)
    dvc_lock: str | Path = "dvc.lock"
    git_cwd: str | Path = "."  # where the git commit is read


@dataclass
class BuildResult:
    """What ``release build`` produced."""

    model: str
    version: int
    manifest: ReleaseManifest
    sections: ReleaseSections  # what was checked (the manifest's sections, none of them missing)
    tag: tags.TagResult
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass
class ReleasePlan:
    """A release that passed every check and is ready to be written."""

    model_dir: Path
    sections: ReleaseSections
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


def _check_warmup_files(model_dir: Path, where: Path, cfg: mc.ModelConfig) -> None:
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


def _parse_configs(model_dir: Path) -> list[mc.ModelConfig]:
    """``config.pbtxt`` and every ``configs/*.pbtxt``, parsed with Triton's schema, their warmup files present.

    Raises:
        ReleaseError: a config Triton cannot parse, or a model_warmup naming a file the repository lacks.
    """
    fix = "re-run the repository stage (`dvc repro repository`), which renders configs from Triton's schema"
    parsed = []
    for path in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))]:
        cfg = pointer.parse_config(path.read_text(encoding="utf-8"), str(path), fix=fix)
        _check_warmup_files(model_dir, path, cfg)
        parsed.append(cfg)
    return parsed


def _sections(inputs: BuildInputs, model_dir: Path, vdir: Path, outputs: list[str], dvc: DvcCheck) -> tuple[ReleaseSections, Path | None]:
    """What the manifest records beside the files, and the parity samples to ship (None: there are none).

    Raises:
        ReleaseError: parity is missing, failed or vouches for other files; dvc.lock is missing.
    """
    bench = BenchSection.absent(dvc.bench_detached) if dvc.bench_detached else reports.bench_section(inputs.bench, model_dir.name, model_dir, vdir)
    samples, samples_section = reports.parity_samples(inputs.parity)
    sections = ReleaseSections(
        git=provenance.git_info(inputs.git_cwd),
        dvc=dvc,
        dvc_lock=provenance.dvc_lock_hashes(inputs.dvc_lock),
        parity=reports.parity_section(inputs.parity, vdir, outputs),
        bench=bench,
        environment=provenance.environment(),
        gto_artifact=tags.gto_name(model_dir.name),
        samples=samples_section,
    )
    return sections, samples


def _notes(sections: ReleaseSections) -> list[str]:
    """What a release lacks or cannot vouch for: printed after the build, never a refusal."""
    notes = []
    if not sections.dvc.checked:
        notes.append(f"UNCHECKED EVIDENCE (--unchecked-evidence): {sections.dvc.reason}")
    if sections.git.dirty:
        notes.append("the git work tree has uncommitted changes: the recorded commit does not fully describe this release")
    if not sections.bench.measured:
        notes.append(f"no bench summary: {sections.bench.reason}")
    if sections.samples.status != "shipped":
        notes.append(f"no samples for `release canary` to replay: {sections.samples.reason}")
    return notes


def plan_release(
    store: ReleaseStore, inputs: BuildInputs, model: str | None = None, tag: bool = True, dvc: DvcCheck | None = None, unchecked_evidence: bool = False
) -> ReleasePlan:
    """Run every check of a release of ``inputs.repository`` without writing anything.

    ``dvc`` is a :func:`pipeline.release.evidence.dvc_check.check` result computed once for several
    models of one repository (None: check here, with ``unchecked_evidence`` as
    ``release build --unchecked-evidence`` passes it).

    Raises:
        ReleaseError: a config Triton cannot parse; the DVC pipeline is stale; parity is
        missing, failed or vouches for other files; the evidence is not the DVC outputs dvc.lock
        records (without ``unchecked_evidence``); dvc.lock is missing; with ``tag``, GTO
        would refuse the version tag (e.g. this commit already carries a version).
    """
    t0 = time.perf_counter()
    model_dir = find_model_dir(inputs.repository, model)
    vdir = version_dir(model_dir)
    parsed = _parse_configs(model_dir)
    dvc_state = dvc if dvc is not None else dvc_check.check(inputs.repository, inputs.parity, inputs.bench, unchecked_evidence)
    sections, samples = _sections(inputs, model_dir, vdir, [o.name for o in parsed[0].output], dvc_state)
    if tag:
        versions = store.versions(model_dir.name)
        tags.check_register(sections.git.toplevel, model_dir.name, (versions[-1] + 1) if versions else 1, sections.git.commit)
    return ReleasePlan(model_dir, sections, tag, _notes(sections), t0, samples)


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

    name, git = plan.model_dir.name, plan.sections.git
    extra = [(plan.samples, reports.SAMPLES_FILE)] if plan.samples is not None else []
    version, manifest = store.add_release(name, plan.model_dir, plan.sections, sign=sign, extra=extra)
    tag_result = tags.TagResult(None, "disabled (--no-tag)")
    if plan.tag:
        # The tag carries the manifest's digest, so git also pins what this release contained.
        digest, _ = store.fs.sha256(f"{store.release_rel(name, version)}/manifest.json")
        tag_result = tags.register(git.toplevel, name, version, git.commit, f"release {version} of {name}; manifest sha256 {digest}; store {store.url}")
    return BuildResult(name, version, manifest, plan.sections, tag_result, time.perf_counter() - plan.started, plan.notes)


def build_release(
    store: ReleaseStore,
    inputs: BuildInputs,
    model: str | None = None,
    sign_key: str | Path | None = None,
    tag: bool = True,
    dvc: DvcCheck | None = None,
    unchecked_evidence: bool = False,
) -> BuildResult:
    """Check (:func:`plan_release`), then write (:func:`publish_release`) the next release of one model.

    Raises:
        ReleaseError: see both; nothing is published when a check fails.
    """
    return publish_release(store, plan_release(store, inputs, model, tag, dvc, unchecked_evidence), sign_key)
