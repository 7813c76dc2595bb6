"""``release build``: freeze the repository stage's output into the next immutable release."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.errors import ReleaseError
from pipeline.release import gto_tags, pointer, signing
from pipeline.release import manifest as mf
from pipeline.release.store import ReleaseStore


@dataclass
class BuildResult:
    """What ``release build`` produced."""

    model: str
    version: int
    manifest: dict[str, Any]
    tag: gto_tags.TagResult
    seconds: float
    notes: list[str] = field(default_factory=list)


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


def build_release(
    store: ReleaseStore,
    repository: str | Path,
    parity: str | Path,
    bench: str | Path | None = None,
    dvc_lock: str | Path = "dvc.lock",
    model: str | None = None,
    git_cwd: str | Path = ".",
    sign_key: str | Path | None = None,
    tag: bool = True,
) -> BuildResult:
    """Check the parity gate, then write release N+1 with its manifest (and signature, and git tag).

    Raises:
        ReleaseError: parity missing or failed, repository or dvc.lock missing, store not
        writable, signing failed. Nothing is published when it raises.
    """
    t0 = time.perf_counter()
    model_dir = find_model_dir(repository, model)
    parity_summary = mf.read_parity(parity)  # refuse before touching the store
    for cfg in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))]:
        # Triton's schema, before anything is written.
        pointer.parse_config(cfg.read_text(encoding="utf-8"), str(cfg), fix="re-run the repository stage (`dvc repro repository`), which renders configs from Triton's schema")
    sections = {
        "git": mf.git_info(git_cwd),
        "dvc_lock": mf.dvc_lock_hashes(dvc_lock),
        "parity": parity_summary,
        "bench": mf.read_bench(bench),
        "environment": mf.environment(),
        "gto": {"artifact": gto_tags.gto_name(model_dir.name)},
    }
    notes = []
    if sections["git"]["dirty"]:
        notes.append("the git work tree has uncommitted changes: the recorded commit does not fully describe this release")
    hook = None
    if sign_key is not None:
        key = sign_key

        def hook(staged: str, _m: dict[str, Any]) -> None:
            signing.sign_dir(store.fs, staged, key)

    version, manifest = store.add_release(model_dir.name, model_dir, sections, before_publish=hook)
    tag_result = gto_tags.TagResult(None, "disabled (--no-tag)")
    if tag:
        # The tag carries the manifest's digest, so git also pins what this release contained.
        digest, _ = store.fs.sha256(f"{store.release_rel(model_dir.name, version)}/manifest.json")
        tag_result = gto_tags.register(
            sections["git"]["toplevel"], model_dir.name, version, sections["git"]["commit"],
            f"release {version} of {model_dir.name}; manifest sha256 {digest}; store {store.url}",
        )
    return BuildResult(model_dir.name, version, manifest, tag_result, time.perf_counter() - t0, notes)
