"""The release store: immutable numbered releases, and one Triton model repository per environment.

Layout (under any fsspec URL)::

    releases/<model>/<N>/manifest.json      sha256 of every file, git commit, DVC check, dvc.lock hashes, parity and bench summaries, env
    releases/<model>/<N>/files/             config.pbtxt, configs/*.pbtxt, <N>/model.* (the version dir renumbered)
    releases/<model>/<N>/release.sig        optional model-signing signature of manifest.json + files/
    envs/<env>/                             a Triton --model-repository
    envs/<env>/<model>/config.pbtxt         the pointer: version_policy { specific { versions: [live] } }
    envs/<env>/<model>/<N>/                 every version ever promoted to <env> (rollback targets)
    envs/<env>/<model>/warmup/<N>/          release N's model_warmup rows (files/warmup/); the config names the live one's
    history/<env>/<model>.json              the promote/rollback log (kept out of the Triton repository)

Releases are written so that a reader sees all of one or none of it (local: staging name,
verify, rename; object stores: claim, upload, verify, manifest last; see
:mod:`pipeline.release.store.publish`); nothing here ever rewrites or deletes a published release.
Switches of one environment are serialized by :mod:`pipeline.release.store.lock`, and the pointer
and history are replaced only if they are still what was read under the lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import ReleaseError
from pipeline.records.release import ReleaseManifest, ReleaseSections, Source, read_manifest
from pipeline.release.store import env_copy, faults, lock, pointer, publish, signing
from pipeline.release.store import history as hist_mod
from pipeline.release.store.checksums import Mismatch, compare, raise_on_mismatch
from pipeline.release.store.fs import StoreFS
from pipeline.release.store.history import HistoryEvent
from pipeline.release.store.s3 import Conflict
from pipeline.release.store.signing import SIGNATURE

RELEASE_ENTRIES = {"manifest.json", "files", SIGNATURE}
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class EnvState:
    """What an environment serves for one model, read from the store."""

    env: str
    model: str
    live: int | None
    present: list[int] = field(default_factory=list)
    history: list[HistoryEvent] = field(default_factory=list)
    pointer_tag: str | None = None  # version of config.pbtxt that was read (S3 ETag / sha256); None = absent
    history_tag: str | None = None
    interrupted: HistoryEvent | None = None  # the last switch, recorded as an intent whose pointer never flipped


class ReleaseStore:
    """Read and write releases and environments in one store."""

    def __init__(
        self, url: str | os.PathLike[str], environments: list[str] | None = None, lock_lease_s: float = 60.0, public_key: str | None = None, require_signature: bool = False
    ) -> None:
        self.public_key, self.require_signature = public_key, require_signature
        # Environments that refuse a release built with --unchecked-evidence (the last one, with release.production_requires_checked_evidence; the CLI sets it).
        self.checked_evidence_envs: list[str] = []
        self.fs = StoreFS(url)
        self.url = self.fs.url
        self.environments = list(environments or ["dev", "staging", "production"])
        self.lock_lease_s = lock_lease_s  # object stores: lock/claim expiry after the last heartbeat (release.lock_lease_s)

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
        """What to give ``tritonserver --model-repository`` for ``env`` (a path, or s3://http://host:port/bucket/...)."""
        return self.fs.triton_url(f"envs/{env}")

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

    def model_set(self, model: str | None, companions: tuple[str, ...]) -> list[str]:
        """What one promote or rollback switches: ``model`` alone when named; else the store's only model, or its one
        model with the companions the repository ships beside it (``<name><suffix>`` for each suffix: the TensorRT
        model, the text endpoint), the model first. Raises ReleaseError as :meth:`resolve_model` does otherwise."""
        models = self.models()
        if model is None and len(models) > 1:
            bases = [m for m in models if not any(m.endswith(sfx) and m[: -len(sfx)] in models for sfx in companions)]
            if len(bases) == 1:
                return [bases[0], *sorted(m for m in models if m != bases[0])]
        return [self.resolve_model(model)]

    def built_with(self, model: str, base: str, version: int) -> int:
        """The newest release of ``model`` built from the same git commit as release ``version`` of ``base``.

        Raises:
            ReleaseError: there is none (the two would not be one consistent set).
        """
        commit = self.manifest(base, version).commit
        for v in reversed(self.versions(model)):
            if commit is not None and self.manifest(model, v).commit == commit:
                return v
        raise ReleaseError(
            f"no release of '{model}' was built with release {version} of '{base}' (git commit {commit}): they would not switch as one set",
            fix="build the release again (`release build` releases every model of the repository together), or pass --model to switch one",
            details={f"{model} versions": self.versions(model)},
        )

    def versions(self, model: str) -> list[int]:
        """Published release versions, ascending (staging dirs are not releases)."""
        out = [int(n) for n in self.fs.listdir(f"releases/{model}") if n.isdigit()]
        return sorted(v for v in out if self.fs.exists(f"{self.release_rel(model, v)}/manifest.json"))

    def is_release(self, model: str, version: int) -> bool:
        """Whether ``version`` is a published release (its manifest exists: the commit of an upload)."""
        return self.fs.exists(f"{self.release_rel(model, version)}/manifest.json")

    def manifest(self, model: str, version: int) -> ReleaseManifest:
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
        return read_manifest(self.fs.read_bytes(rel), self.fs.path(rel))

    def check_release(self, model: str, version: int) -> tuple[ReleaseManifest, list[Mismatch]]:
        """The manifest and every difference between it and the release's files (no raise on differences)."""
        m = self.manifest(model, version)
        rel = self.release_rel(model, version)
        # A claim left by a process killed right after its commit is a marker, not content.
        extra = [e for e in self.fs.listdir(rel) if e not in RELEASE_ENTRIES and e != publish.CLAIM]
        problems = [Mismatch("unexpected", e, "not part of a release") for e in extra]
        problems += compare(m.files, self.fs.walk_files(f"{rel}/files"), lambda f: self.fs.sha256(f"{rel}/files/{f}"))
        return m, problems + [Mismatch("inconsistent", path, detail) for path, detail in m.inconsistencies()]

    def verify_release(self, model: str, version: int) -> ReleaseManifest:
        """Re-hash every file of a release; refuse if one changed, vanished or was added.

        Returns the manifest. Raises :class:`ReleaseError` listing every difference.
        """
        m, problems = self.check_release(model, version)
        rel = self.release_rel(model, version)
        raise_on_mismatch(
            problems,
            f"release {version} of '{model}' was modified after it was built",
            self.fs.path(rel),
            "do not promote it; restore the release from an exported archive or build a new one (`release build`)",
        )
        return m

    def add_release(
        self,
        model: str,
        source_dir: Path,
        sections: ReleaseSections,
        sign: Callable[[Path], None] | None = None,
        extra: list[tuple[Path, str]] | None = None,
    ) -> tuple[int, ReleaseManifest]:
        """Freeze ``source_dir`` (a shipped Triton model dir) as the next release of ``model``.

        The version dir of the source is renumbered to the new version. ``extra`` files ride along
        under ``files/<rel>`` (the parity samples a canary replays), checksummed like the rest. Files are hashed at the
        source, uploaded, re-hashed in the store, and only then published (:mod:`~pipeline.release.store.publish`).
        ``sign(dir)`` writes ``release.sig`` into a local copy of the complete release
        (manifest.json + files/) before anything is uploaded, so a signing failure writes nothing.

        Raises:
            ReleaseError: bad model name, not exactly one version dir, store not writable, a corrupted upload.
        """
        if not MODEL_NAME.match(model):
            raise ReleaseError(f"model name '{model}' is not usable as a directory name", fix="rename the model (model.name) to letters, digits, - _ .")
        version_dirs = sorted(p.name for p in source_dir.iterdir() if p.is_dir() and p.name.isdigit())
        if len(version_dirs) != 1:
            raise ReleaseError(
                f"the repository {source_dir} must hold exactly one numbered version directory, found {version_dirs or 'none'}",
                fix="re-run the repository stage (`dvc repro repository`), which writes one version",
            )
        # Bytecode is never shipped: a python-backend model served from the repository may have left some beside it.
        sources = [(p, p.relative_to(source_dir).as_posix()) for p in sorted(source_dir.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
        sources += [(p, rel) for p, rel in extra or [] if rel not in {r for _, r in sources}]
        digests = publish.expected_of(sources)  # hashed once at the source, whatever number the release gets
        source = Source(str(source_dir), version_dirs[0])
        made: dict[int, ReleaseManifest] = {}

        with tempfile.TemporaryDirectory(prefix="release-sign-") as tmp:

            def render(version: int) -> publish.ReleaseFiles:
                def renumber(rel: str) -> str:  # the source's version dir becomes <N>/
                    head, _, tail = rel.partition("/")
                    return f"{version}/{tail}" if head == version_dirs[0] else rel

                uploads = [(p, f"files/{renumber(rel)}") for p, rel in sources]
                files = {renumber(rel): digests[rel] for _, rel in sources}
                made[version] = ReleaseManifest.new(model, version, hist_mod.now(), source, files, sections)
                data = made[version].to_bytes()
                if sign is not None:
                    uploads.append((_signed_copy(Path(tmp) / str(version), uploads, data, sign), SIGNATURE))
                return publish.ReleaseFiles(uploads, data, {f"files/{k}": v for k, v in files.items()} | publish.expected_of(uploads[len(sources) :]))

            version = publish.write_release(self, model, None, render)
        return version, made[version]

    # ------------------------------------------------------------ environments
    def env_state(self, env: str, model: str) -> EnvState:
        """Live version (from config.pbtxt), version dirs present, and history of ``env``."""
        rel = self.model_rel(env, model)
        live = None
        ptr = self.fs.read_tagged(f"{rel}/config.pbtxt")  # bytes and their version tag from one read
        if ptr is not None:
            cfg = pointer.parse_config(ptr[0].decode("utf-8"), self.fs.path(rel, "config.pbtxt"))
            versions = pointer.live_versions(cfg)
            live = versions[-1] if versions else None
        present = sorted(int(n) for n in self.fs.listdir(rel) if n.isdigit())
        history: list[HistoryEvent] = []
        hist = self.fs.read_tagged(self.history_rel(env, model))
        if hist is not None:
            try:
                history = json.loads(hist[0])
            except json.JSONDecodeError as e:
                raise ReleaseError(
                    f"the promotion history of '{env}' is corrupt",
                    fix="restore it from a backup; the live version is still the one in config.pbtxt",
                    details={"file": self.fs.path(self.history_rel(env, model)), "error": e},
                ) from None
        history, interrupted = hist_mod.reconcile(history, ptr[0] if ptr else None, live)
        return EnvState(env, model, live, present, history, ptr[1] if ptr else None, hist[1] if hist else None, interrupted)

    def served_config(self, env: str, model: str) -> mc.ModelConfig | None:
        """The config ``env`` serves ``model`` with (its pointer), parsed; None when the environment has no pointer for it.

        Raises:
            ReleaseError: the pointer is not a Triton config.
        """
        rel = f"{self.model_rel(env, model)}/config.pbtxt"
        got = self.fs.read_tagged(rel)
        return pointer.parse_config(got[0].decode("utf-8"), self.fs.path(rel)) if got is not None else None

    def verify_env_copy(self, env: str, model: str, version: int, m: ReleaseManifest) -> list[Mismatch]:
        """Differences between the environment's copy of ``version`` (``<N>/`` and ``warmup/<N>/``) and the release manifest."""
        return env_copy.verify(self, env, model, version, m)

    def install_version(self, env: str, model: str, version: int, m: ReleaseManifest) -> str:
        """Make ``envs/<env>/<model>/<version>/`` and its warmup data a complete, verified copy of the release.

        Returns "copied", "present", "replaced" or "completed" (see :func:`pipeline.release.store.env_copy.install`).
        """
        return env_copy.install(self, env, model, version, m)

    def drop_bytecode(self, rel: str) -> None:
        """Remove every ``__pycache__`` directory under ``rel``."""
        for d in sorted({posixpath.dirname(f) for f in self.fs.walk_files(rel) if "__pycache__/" in f"/{f}"}):
            self.fs.remove_tree(f"{rel}/{d}")

    def release_config(self, model: str, version: int, variant: str | None) -> tuple[mc.ModelConfig, str]:
        """The release's config (``config.pbtxt`` or ``configs/<variant>.pbtxt``) as an environment serves it, and the variant name.

        As an environment serves it: its ``model_warmup`` reads ``warmup/<version>/`` (:func:`pointer.for_version`).
        """
        base = f"{self.release_rel(model, version)}/files"
        if variant and variant != "default":
            self.check_variant(self.manifest(model, version), variant)
            rel = f"{base}/configs/{variant}.pbtxt"
            return pointer.for_version(pointer.parse_config(self.fs.read_text(rel), self.fs.path(rel)), version), variant
        rel = f"{base}/config.pbtxt"
        return pointer.for_version(pointer.parse_config(self.fs.read_text(rel), self.fs.path(rel)), version), "default"

    def check_signature(self, model: str, version: int, public_key: str | None = None) -> None:
        """The store's signature policy for one release (``public_key``: a command's --public-key, else the store's).

        Raises:
            ReleaseError: a key is given and the signature is missing or invalid; or signatures are required and no key is.
        """
        key = public_key or self.public_key
        if key:
            signing.verify_dir(self.fs, self.release_rel(model, version), key)
        elif self.require_signature:
            raise ReleaseError(
                "this store requires signed releases (release.require_signature) but no public key is configured",
                fix="set release.public_key to the PEM EC public key, or pass --public-key; nothing was changed",
            )

    def check_evidence(self, m: ReleaseManifest, env: str) -> None:
        """Refuse a release whose evidence dvc.lock did not vouch for, in an environment that requires it.

        Raises:
            ReleaseError: ``env`` is in ``checked_evidence_envs`` and the manifest's ``dvc`` section is not checked.
        """
        if env in self.checked_evidence_envs and not m.evidence_checked:
            raise ReleaseError(
                f"release {m.version} of '{m.model}' was built from evidence dvc.lock does not vouch for, and '{env}' requires it",
                fix="build the release from the pipeline's outputs (`dvc repro`, then `release build`), or pass --allow-unchecked-evidence; nothing was changed",
                details={"reason": (m.dvc.reason if m.dvc else None) or "(no dvc section)"},
            )

    def check_variant(self, m: ReleaseManifest, variant: str) -> None:
        """Refuse a variant that is not a name from the release's own manifest (so no path outside the release is read).

        Raises:
            ReleaseError: with the variants the release has.
        """
        have = m.variants()
        if variant not in have:
            raise ReleaseError(
                f"release {m.version} of '{m.model}' has no config variant {variant!r}",
                fix=f"use --variant with one of {have or '(none: the release has only config.pbtxt)'} or leave it out; nothing was changed",
            )

    @contextlib.contextmanager
    def env_lock(self, env: str, model: str, command: str = "promote/rollback") -> Iterator[lock.HeldLock]:
        """Serialize promote/rollback of one environment (local: flock; object stores: a lease object).

        Yields a guard whose ``check()`` must pass right before the flip. See :mod:`pipeline.release.store.lock`.

        Raises:
            ReleaseError: another promote or rollback of this environment holds the lock.
        """
        with lock.env_lock(self.fs, env, model, self.lock_lease_s, command) as guard:
            yield guard

    def flip(self, env: str, model: str, data: bytes, expect: str | None) -> None:
        """The atomic step: replace the environment's config.pbtxt (its pointer) if it is still ``expect``.

        One PUT on object stores (If-Match its ETag, or If-None-Match when there was none): a reader
        gets the old config or the new one.

        Raises:
            ReleaseError: the pointer changed since it was read under the lock (nothing was written).
        """
        rel = f"{self.model_rel(env, model)}/config.pbtxt"
        try:
            faults.point("before_flip", self.fs.path(rel))
            self.fs.write_if(rel, data, expect)
        except OSError as e:
            raise ReleaseError(
                f"could not write the pointer of '{env}': {e.strerror or e}; the live version is unchanged",
                fix="free space on (or fix access to) the store, then run the command again (the recorded intent is marked aborted)",
                details={"pointer": self.fs.path(rel)},
            ) from None
        except Conflict:
            raise ReleaseError(
                f"the pointer of '{env}' changed while this command held the lock; it was not overwritten",
                fix="someone edited config.pbtxt or switched without the lock: run `release list`, then promote again",
                details={"pointer": self.fs.path(rel)},
            ) from None

    def record_intent(self, env: str, model: str, event: HistoryEvent, state: EnvState) -> None:
        """Record a promote/rollback *before* its flip, with the sha256 of the pointer it will write.

        Readers (:func:`~pipeline.release.store.history.reconcile`) confirm the event by the pointer: flipped, it happened; not flipped, it is
        marked aborted. So pointer and history cannot disagree after a kill or an error at any point.

        Raises:
            ReleaseError: the history changed since ``state`` was read, or could not be written (nothing changed).
        """
        rel = self.history_rel(env, model)
        data = (json.dumps(state.history + [event], indent=2) + "\n").encode()
        try:
            faults.point("record_intent", self.fs.path(rel))
            self.fs.write_if(rel, data, state.history_tag)
        except Conflict:
            raise ReleaseError(
                f"the history of '{env}' changed while this command held the lock; nothing was switched",
                fix="someone wrote the history without the lock: run `release verify`, then switch again",
                details={"history": self.fs.path(rel)},
            ) from None
        except OSError as e:
            raise ReleaseError(
                f"could not record the switch in the history of '{env}': {e.strerror or e}; nothing was switched",
                fix="free space on (or fix access to) the store, then run the command again",
                details={"history": self.fs.path(rel)},
            ) from None

    def check_pointer(self, state: EnvState) -> None:
        """Refuse an environment whose pointer names a version that is not a release in the store.

        Raises:
            ReleaseError: with the versions that exist and how to point the environment at one.
        """
        if state.live is None or self.is_release(state.model, state.live):
            return
        raise ReleaseError(
            f"the pointer of '{state.env}' names version {state.live} of '{state.model}', which is not a release in {self.url}",
            fix=f"point '{state.env}' at a real release: `release promote --to {state.env} --version <N>` (its history is kept)",
            details={"pointer": self.fs.path(self.model_rel(state.env, state.model), "config.pbtxt"), "releases": self.versions(state.model) or "(none)"},
        )


def _signed_copy(root: Path, uploads: list[tuple[Path, str]], manifest: bytes, sign: Callable[[Path], None]) -> Path:
    """Lay the release out locally (files/ + manifest.json), sign it, return the signature file."""
    if root.exists():
        shutil.rmtree(root)
    for src, rel in uploads:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, root / rel)
    (root / "manifest.json").write_bytes(manifest)
    sign(root)
    return root / SIGNATURE
