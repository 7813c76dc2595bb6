"""The release store: immutable numbered releases, and one Triton model repository per environment.

Layout (under any fsspec URL)::

    releases/<model>/<N>/manifest.json      sha256 of every file, git commit, DVC check, dvc.lock hashes, parity and bench summaries, env
    releases/<model>/<N>/files/             config.pbtxt, configs/*.pbtxt, <N>/model.* (the version dir renumbered)
    releases/<model>/<N>/release.sig        optional model-signing signature of manifest.json + files/
    envs/<env>/                             a Triton --model-repository
    envs/<env>/<model>/config.pbtxt         the pointer: version_policy { specific { versions: [live] } }
    envs/<env>/<model>/<N>/                 every version ever promoted to <env> (rollback targets)
    history/<env>/<model>.json              the promote/rollback log (kept out of the Triton repository)

Releases are written into a staging name and published by rename only after their
checksums were verified; nothing here ever rewrites or deletes a published release.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import posixpath
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.atomic import file_digest
from pipeline.core.errors import ReleaseError
from pipeline.release import manifest as mf
from pipeline.release import pointer
from pipeline.release.fs import StoreFS
from pipeline.release.signing import SIGNATURE

RELEASE_ENTRIES = {"manifest.json", "files", SIGNATURE}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class EnvState:
    """What an environment serves for one model, read from the store."""

    env: str
    model: str
    live: int | None
    present: list[int] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)


class ReleaseStore:
    """Read and write releases and environments in one store."""

    def __init__(self, url: str | os.PathLike[str], environments: list[str] | None = None) -> None:
        self.fs = StoreFS(url)
        self.url = self.fs.url
        self.environments = list(environments or ["dev", "staging", "production"])

    # ------------------------------------------------------------ naming
    @staticmethod
    def release_rel(model: str, version: int) -> str:
        return f"releases/{model}/{version}"

    @staticmethod
    def model_rel(env: str, model: str) -> str:
        return f"envs/{env}/{model}"

    @staticmethod
    def history_rel(env: str, model: str) -> str:
        return f"history/{env}/{model}.json"

    def env_repository(self, env: str) -> str:
        """The path to give ``tritonserver --model-repository`` for ``env``."""
        return self.fs.path("envs", env)

    def check_env(self, env: str) -> None:
        if env not in self.environments:
            raise ReleaseError(
                f"unknown environment '{env}'",
                fix=f"use one of {self.environments} (or add it to release.environments in conf/release/default.yaml)",
            )

    # ------------------------------------------------------------ releases
    def models(self) -> list[str]:
        return [m for m in self.fs.listdir("releases") if not m.startswith(".")]

    def resolve_model(self, model: str | None) -> str:
        """``model`` or, when None, the store's only model."""
        models = self.models()
        if model:
            if model not in models:
                raise ReleaseError(f"no releases of model '{model}' in {self.url}", fix=f"build one with `release build`; models in the store: {models or 'none'}")
            return model
        if len(models) == 1:
            return models[0]
        if not models:
            raise ReleaseError(f"there are no releases in {self.url}", fix="build one with `release build` (or pass the right --store)")
        raise ReleaseError(
            f"the store {self.url} holds {len(models)} models; say which one",
            fix="pass --model <name>" if models else "build a release first with `release build`",
            details={"models": ", ".join(models) or "(none)"},
        )

    def versions(self, model: str) -> list[int]:
        """Published release versions, ascending (staging dirs are not releases)."""
        out = [int(n) for n in self.fs.listdir(f"releases/{model}") if n.isdigit()]
        return sorted(v for v in out if self.fs.exists(f"{self.release_rel(model, v)}/manifest.json"))

    def manifest(self, model: str, version: int) -> dict[str, Any]:
        """The manifest of release ``version``.

        Raises:
            ReleaseError: the version does not exist (the message lists the ones that do).
        """
        rel = f"{self.release_rel(model, version)}/manifest.json"
        if not self.fs.exists(rel):
            have = self.versions(model)
            raise ReleaseError(
                f"release version {version} of '{model}' does not exist in {self.url}",
                fix=f"choose one of the existing versions {have}" if have else "build a release first with `release build`",
                details={"existing versions": have or "(none)"},
            )
        return mf.load_manifest(self.fs.read_bytes(rel), self.fs.path(rel))

    def check_release(self, model: str, version: int) -> tuple[dict[str, Any], list[mf.Mismatch]]:
        """The manifest and every difference between it and the release's files (no raise on differences)."""
        m = self.manifest(model, version)
        rel = self.release_rel(model, version)
        extra = [e for e in self.fs.listdir(rel) if e not in RELEASE_ENTRIES]
        problems = [mf.Mismatch("unexpected", e, "not part of a release") for e in extra]
        problems += mf.compare(m["files"], self.fs.walk_files(f"{rel}/files"), lambda f: self.fs.sha256(f"{rel}/files/{f}"))
        return m, problems

    def verify_release(self, model: str, version: int) -> dict[str, Any]:
        """Re-hash every file of a release; refuse if one changed, vanished or was added.

        Returns the manifest. Raises :class:`ReleaseError` listing every difference.
        """
        m, problems = self.check_release(model, version)
        rel = self.release_rel(model, version)
        mf.raise_on_mismatch(
            problems,
            f"release {version} of '{model}' was modified after it was built",
            self.fs.path(rel),
            "do not promote it; restore the release from an exported archive or build a new one (`release build`)",
        )
        return m

    def add_release(
        self, model: str, source_dir: Path, sections: dict[str, Any], before_publish: Callable[[str, dict[str, Any]], None] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Freeze ``source_dir`` (a shipped Triton model dir) as the next release of ``model``.

        The version dir of the source is renumbered to the new version. Files are hashed
        at the source, uploaded into a staging dir, re-hashed in the store, and only then
        published under the version number. ``before_publish(staged_rel, manifest)`` runs
        on the complete staged release (signing uses it, so the signature is part of it).
        """
        if not _NAME.match(model):
            raise ReleaseError(f"model name '{model}' is not usable as a directory name", fix="rename the model (model.name) to letters, digits, - _ .")
        self.fs.probe_writable("releases")
        version_dirs = sorted(p.name for p in source_dir.iterdir() if p.is_dir() and p.name.isdigit())
        if len(version_dirs) != 1:
            raise ReleaseError(
                f"the repository {source_dir} must hold exactly one numbered version directory, found {version_dirs or 'none'}",
                fix="re-run the repository stage (`dvc repro repository`), which writes one version",
            )
        existing = self.versions(model)
        version = (existing[-1] + 1) if existing else 1
        src_files = sorted(p for p in source_dir.rglob("*") if p.is_file())
        staged = self.fs.staging_name(self.release_rel(model, version))
        files: mf.FileTable = {}
        try:
            for p in src_files:
                rel = p.relative_to(source_dir).as_posix()
                if rel.split("/")[0] == version_dirs[0]:
                    rel = f"{version}/" + rel.split("/", 1)[1]  # the source's version dir becomes <N>/
                digest, size = file_digest(p)
                files[rel] = {"sha256": digest, "size": size}
                self.fs.put_file(p, f"{staged}/files/{rel}")
            # What landed in the store is checked against what was read at the source.
            mf.raise_on_mismatch(
                mf.compare(files, self.fs.walk_files(f"{staged}/files"), lambda f: self.fs.sha256(f"{staged}/files/{f}")),
                "the upload to the release store was corrupted", self.fs.path(staged), "re-run `release build`",
            )
            source = {"repository": str(source_dir), "source_version": version_dirs[0]}
            manifest = mf.new_manifest(model, version, files, source, **sections)
            self.fs.write_new(f"{staged}/manifest.json", (json.dumps(manifest, indent=2) + "\n").encode())
            if before_publish is not None:
                before_publish(staged, manifest)
            if self.fs.exists(self.release_rel(model, version)):
                raise ReleaseError(
                    f"release version {version} of '{model}' appeared while this one was being built",
                    fix="another `release build` ran at the same time; run this one again to get the next version",
                )
            self.fs.publish_dir(staged, self.release_rel(model, version))
        except BaseException:
            self.fs.remove_tree(staged)
            raise
        return version, manifest

    # ------------------------------------------------------------ environments
    def env_state(self, env: str, model: str) -> EnvState:
        """Live version (from config.pbtxt), version dirs present, and history of ``env``."""
        rel = self.model_rel(env, model)
        live = None
        if self.fs.exists(f"{rel}/config.pbtxt"):
            cfg = pointer.parse_config(self.fs.read_text(f"{rel}/config.pbtxt"), self.fs.path(rel, "config.pbtxt"))
            versions = pointer.live_versions(cfg)
            live = versions[-1] if versions else None
        present = sorted(int(n) for n in self.fs.listdir(rel) if n.isdigit())
        history: list[dict[str, Any]] = []
        if self.fs.exists(self.history_rel(env, model)):
            try:
                history = json.loads(self.fs.read_bytes(self.history_rel(env, model)))
            except json.JSONDecodeError as e:
                raise ReleaseError(
                    f"the promotion history of '{env}' is corrupt", fix="restore it from a backup; the live version is still the one in config.pbtxt",
                    details={"file": self.fs.path(self.history_rel(env, model)), "error": e},
                ) from None
        return EnvState(env, model, live, present, history)

    def verify_env_copy(self, env: str, model: str, version: int, m: dict[str, Any]) -> list[mf.Mismatch]:
        """Differences between ``envs/<env>/<model>/<version>/`` and the release manifest."""
        rel = f"{self.model_rel(env, model)}/{version}"
        prefix = f"{version}/"
        expected = {k[len(prefix):]: v for k, v in m["files"].items() if k.startswith(prefix)}
        return mf.compare(expected, self.fs.walk_files(rel), lambda f: self.fs.sha256(f"{rel}/{f}"))

    def install_version(self, env: str, model: str, version: int, m: dict[str, Any]) -> str:
        """Make ``envs/<env>/<model>/<version>/`` a complete, verified copy of the release's version dir.

        Returns what was done: "copied", "present" (already there and verified) or
        "replaced" (a damaged, non-live copy was rewritten from the verified release).
        """
        self.fs.probe_writable(self.model_rel(env, model))
        final = f"{self.model_rel(env, model)}/{version}"
        action = "copied"
        live = self.env_state(env, model).live
        if self.fs.exists(final):
            if live != version:
                # A python-backend stub writes __pycache__/ next to model.py. A planted .pyc would
                # run instead of the verified source, so caches are removed (never ignored) before
                # the strict check; Python rebuilds them from the verified source.
                self.drop_bytecode(final)
            problems = self.verify_env_copy(env, model, version, m)
            if not problems:
                return "present"
            if live == version:
                mf.raise_on_mismatch(
                    problems, f"the live copy of version {version} in '{env}' was modified",
                    self.fs.path(final), "roll back or promote another version first, then promote this one again to rewrite it",
                )
            self.fs.remove_tree(final)
            action = "replaced"
        staged = self.fs.staging_name(final)
        src = f"{self.release_rel(model, version)}/files/{version}"
        try:
            for f in self.fs.walk_files(src):
                self.fs.copy_file(f"{src}/{f}", f"{staged}/{f}")
            prefix = f"{version}/"
            expected = {k[len(prefix):]: v for k, v in m["files"].items() if k.startswith(prefix)}
            mf.raise_on_mismatch(
                mf.compare(expected, self.fs.walk_files(staged), lambda f: self.fs.sha256(f"{staged}/{f}")),
                f"copying version {version} into '{env}' produced different bytes", self.fs.path(staged), "check the store's storage and retry",
            )
            self.fs.publish_dir(staged, final)
        except BaseException:
            self.fs.remove_tree(staged)
            raise
        return action

    def drop_bytecode(self, rel: str) -> None:
        """Remove every ``__pycache__`` directory under ``rel``."""
        for d in sorted({posixpath.dirname(f) for f in self.fs.walk_files(rel) if "__pycache__/" in f"/{f}"}):
            self.fs.remove_tree(f"{rel}/{d}")

    def release_config(self, model: str, version: int, variant: str | None) -> tuple[Any, str]:
        """The release's config (``config.pbtxt`` or ``configs/<variant>.pbtxt``) and the variant name."""
        base = f"{self.release_rel(model, version)}/files"
        if variant:
            rel = f"{base}/configs/{variant}.pbtxt"
            if not self.fs.exists(rel):
                have = [posixpath.splitext(n)[0] for n in self.fs.listdir(f"{base}/configs")]
                raise ReleaseError(f"release {version} has no config variant '{variant}'", fix=f"use --variant with one of {have}")
            return pointer.parse_config(self.fs.read_text(rel), self.fs.path(rel)), variant
        rel = f"{base}/config.pbtxt"
        return pointer.parse_config(self.fs.read_text(rel), self.fs.path(rel)), "default"

    @contextlib.contextmanager
    def env_lock(self, env: str, model: str) -> Iterator[None]:
        """Serialize promote/rollback of one environment (local stores: an flock on a lock file).

        Object stores have no locks; there the last writer of the pointer wins, and the
        history may miss the other writer's event. Run one release job per environment.
        """
        if not self.fs.local:
            yield
            return
        self.fs.probe_writable("history")
        path = self.fs.local_path("history", f".{env}.{model}.lock")
        with open(path, "a+b") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ReleaseError(
                    f"another promote or rollback of '{model}' in '{env}' is running",
                    fix="wait for it to finish, then run this command again",
                    details={"lock": path},
                ) from None
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def flip(self, env: str, model: str, data: bytes) -> None:
        """The atomic step: replace the environment's config.pbtxt (its pointer)."""
        self.fs.write_atomic(f"{self.model_rel(env, model)}/config.pbtxt", data)

    def append_history(self, env: str, model: str, event: dict[str, Any]) -> None:
        """Record a promote/rollback after the flip (the pointer stays the truth if this fails)."""
        hist = self.env_state(env, model).history + [event]
        self.fs.write_atomic(self.history_rel(env, model), (json.dumps(hist, indent=2) + "\n").encode())
