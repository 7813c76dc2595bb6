"""An environment's copy of a release: its version directory, and its warmup data under ``<model>/warmup/<N>/``.

A release keeps the repository stage's layout (``files/<N>/`` and, when its configs have a
``model_warmup``, the sample rows in ``files/warmup/``). An environment is one Triton model
directory holding every version promoted there, with one config.pbtxt; Triton reads a warmup
``input_data_file`` relative to ``<model>/warmup/``. Two releases' rows under one name would
overwrite each other, and a rollback target would then warm up with another release's data, so
each release's rows go to ``<model>/warmup/<N>/`` and the environment's config names them there
(:func:`pipeline.release.store.pointer.for_version`). A release built before warmup existed has no
``warmup/`` files: its copy is the version directory alone, as before.

Both parts are copied and checked against the release manifest's sha256s, by ``install`` (every
promote and rollback) and by ``release verify``.
"""

from __future__ import annotations

import contextlib
import posixpath
from dataclasses import dataclass
from typing import Protocol

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.records.release import FileTable, ReleaseManifest
from pipeline.release.store.checksums import Mismatch, compare as compare_files, raise_on_mismatch
from pipeline.release.store.fs import StoreFS
from pipeline.repository.warmup import WARMUP_DIR


class _Live(Protocol):
    live: int | None


class ReleaseStore(Protocol):
    """What this module uses of :class:`pipeline.release.store.store.ReleaseStore` (which calls it: no import back)."""

    fs: StoreFS

    def model_rel(self, env: str, model: str) -> str: ...
    def release_rel(self, model: str, version: int) -> str: ...
    def env_state(self, env: str, model: str) -> _Live: ...
    def drop_bytecode(self, rel: str) -> None: ...


@dataclass(frozen=True)
class Part:
    """One directory of an environment's copy of a version, and the release files it must hold."""

    rel: str  # store path of the copy: envs/<env>/<model>/<N> or envs/<env>/<model>/warmup/<N>
    src: str  # store path it is copied from: releases/<model>/<N>/files/<N> or .../files/warmup
    label: str  # prefix of its paths in messages: "" (the version dir, as before) or "warmup/<N>/"
    expected: FileTable


def env_file(rel: str, version: int) -> str:
    """Where the release file ``rel`` (``<N>/...`` or ``warmup/...``) sits in an environment's model directory."""
    head, _, tail = rel.partition("/")
    return f"{WARMUP_DIR}/{version}/{tail}" if head == WARMUP_DIR else rel


def parts(store: ReleaseStore, env: str, model: str, version: int, m: ReleaseManifest) -> list[Part]:
    """The version directory, then the warmup data (its expected files empty for a release without any)."""
    files = m.files

    def under(prefix: str) -> FileTable:
        return {k[len(prefix) :]: v for k, v in files.items() if k.startswith(prefix)}

    base, src = store.model_rel(env, model), f"{store.release_rel(model, version)}/files"
    return [
        Part(f"{base}/{version}", f"{src}/{version}", "", under(f"{version}/")),
        Part(f"{base}/{WARMUP_DIR}/{version}", f"{src}/{WARMUP_DIR}", f"{WARMUP_DIR}/{version}/", under(f"{WARMUP_DIR}/")),
    ]


def compare(store: ReleaseStore, part: Part) -> list[Mismatch]:
    """Every difference between a part's copy and the manifest, paths shown with the part's label."""
    fs = store.fs
    found = compare_files(part.expected, fs.walk_files(part.rel), lambda f: fs.sha256(f"{part.rel}/{f}"))
    return [Mismatch(p.kind, part.label + p.path, p.detail) for p in found]


def verify(store: ReleaseStore, env: str, model: str, version: int, m: ReleaseManifest) -> list[Mismatch]:
    """Differences between an environment's copy of ``version`` (both parts) and the release manifest."""
    return [p for part in parts(store, env, model, version, m) for p in compare(store, part)]


def only_warmup_missing(problems: list[Mismatch]) -> bool:
    """Whether every problem is a warmup file that is not there (a copy made before environments carried warmup data)."""
    return bool(problems) and all(p.kind == "missing" and p.path.startswith(f"{WARMUP_DIR}/") for p in problems)


def install(store: ReleaseStore, env: str, model: str, version: int, m: ReleaseManifest) -> str:
    """Make both parts of ``envs/<env>/<model>/`` a complete, verified copy of release ``version``.

    Returns "copied", "present" (already there and verified), "replaced" (a damaged, non-live copy was
    rewritten from the verified release) or "completed" (the live copy lacked its warmup files: they were
    added; the served files were not touched).

    Raises:
        ReleaseError: the store is not writable; the live copy was modified; a copy came out different.
    """
    fs = store.fs
    fs.probe_writable(store.model_rel(env, model))
    version_part, warmup_part = todo = parts(store, env, model, version, m)
    live = store.env_state(env, model).live
    action = "copied"
    if fs.exists(version_part.rel):
        if live != version:
            # A python-backend stub writes __pycache__/ next to model.py. A planted .pyc would run
            # instead of the verified source, so caches are removed (never ignored) before the
            # strict check; Python rebuilds them from the verified source.
            store.drop_bytecode(version_part.rel)
        problems = verify(store, env, model, version, m)
        if not problems:
            return "present"
        if live == version:
            if only_warmup_missing(problems):
                # Added file by file with atomic writes: Triton reads them only when it loads the model.
                for p in problems:
                    name = p.path[len(warmup_part.label) :]
                    fs.write_atomic(f"{warmup_part.rel}/{name}", fs.read_bytes(f"{warmup_part.src}/{name}"))
                _check_copy(store, env, version, warmup_part, warmup_part.rel)
                return "completed"
            raise_on_mismatch(
                problems,
                f"the live copy of version {version} in '{env}' was modified",
                fs.path(version_part.rel),
                "roll back or promote another version first, then promote this one again to rewrite it",
            )
        for part in todo:
            fs.remove_tree(part.rel)
        action = "replaced"
    # The warmup data first: a version directory present in the environment means its whole copy was made.
    for part in reversed(todo):
        if part.expected:
            _copy(store, env, version, part)
        else:
            fs.remove_tree(part.rel)  # nothing of a release without warmup data (a leftover would fail the check)
    return action


def _copy(store: ReleaseStore, env: str, version: int, part: Part) -> None:
    """Copy one part under a staging name (local stores; Triton ignores non-numeric names), verify it, rename it into place.

    Object stores copy straight to the final name (a rename would be one more copy of every object).
    Triton only loads the version the pointer names, and the flip comes after this copy verified; a
    copy left half done by a killed process fails that check next time and is rewritten ("replaced").
    """
    fs = store.fs
    staged = fs.staging_name(part.rel) if fs.s3 is None else part.rel
    try:
        fs.remove_tree(part.rel)  # warmup data left by a killed copy (the version dir is gone or checked above)
        for f in fs.walk_files(part.src):
            fs.copy_file(f"{part.src}/{f}", f"{staged}/{f}")
        _check_copy(store, env, version, part, staged)
        if staged != part.rel:
            fs.publish_dir(staged, part.rel)
    except BaseException:
        if staged != part.rel:
            with contextlib.suppress(Exception):  # the original error is the one to report
                fs.remove_tree(staged)
        raise


def _check_copy(store: ReleaseStore, env: str, version: int, part: Part, at: str) -> None:
    staged = Part(at, part.src, part.label, part.expected)
    raise_on_mismatch(compare(store, staged), f"copying version {version} into '{env}' produced different bytes", store.fs.path(at), "check the store's storage and retry")


def missing_warmup(store: ReleaseStore, env: str, model: str, cfg: mc.ModelConfig) -> list[str]:
    """The warmup files an environment's config names that are not in ``<model>/warmup/`` (Triton cannot load it then)."""
    base = f"{store.model_rel(env, model)}/{WARMUP_DIR}"
    named = sorted({i.input_data_file for s in cfg.model_warmup for i in s.inputs.values() if i.WhichOneof("input_data_type") == "input_data_file"})
    return [f"{WARMUP_DIR}/{n}" for n in named if not store.fs.exists(posixpath.join(base, n))]
