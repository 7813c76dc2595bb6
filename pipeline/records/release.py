"""The release manifest: what a release records about itself (``releases/<model>/<N>/manifest.json``).

It holds the sha256 of every file, the git commit, the dvc.lock hashes of the stages that produced the
repository, whether DVC saw them up to date, the parity and bench summaries (their shas bind them to the files)
and the environment. ``release build`` writes it once and nothing rewrites it: a signature covers its bytes, and
``release import`` carries them unchanged.

The JSON keys are ``schema, model, version, created_at, source, files`` and then the sections ``git, dvc,
dvc_lock, parity, bench, environment, gto, samples``. Manifests written before a section existed still read:
the section is None, and a section's newer keys take their empty value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.core.errors import ReleaseError

SCHEMA = 1
_RESTORE = "restore the release from a backup or an exported archive"


def _present(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` without the keys whose value is None (a section writes only the keys its case has)."""
    return {k: v for k, v in d.items() if v is not None}


# ---------------------------------------------------------------- files
@dataclass(frozen=True)
class FileEntry:
    """One file of a release: its sha256 and size in bytes."""

    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileEntry:
        return cls(str(d["sha256"]), int(d["size"]))


FileTable = dict[str, FileEntry]  # path relative to the release's files/ (or a copy's directory) -> entry


@dataclass(frozen=True)
class Source:
    """The repository directory a release was frozen from, and the version directory it held."""

    repository: str
    source_version: str

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "source_version": self.source_version}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Source:
        return cls(str(d.get("repository", "")), str(d.get("source_version", "")))


# ---------------------------------------------------------------- sections
@dataclass(frozen=True)
class GitInfo:
    """HEAD commit, branch and whether the work tree had changes (all None outside git)."""

    commit: str | None
    branch: str | None
    dirty: bool | None
    toplevel: str | None

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "branch": self.branch, "dirty": self.dirty, "toplevel": self.toplevel}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GitInfo:
        return cls(d.get("commit"), d.get("branch"), d.get("dirty"), d.get("toplevel"))


@dataclass(frozen=True)
class DvcCheck:
    """Whether DVC saw the pipeline behind the repository up to date, and the stage out each evidence file is.

    ``checked`` False: built with ``--unchecked-evidence`` (``reason`` says why it could not be checked).
    """

    checked: bool
    project: str | None = None
    target: str | None = None
    stages: list[str] | None = None
    not_checked: dict[str, str] | None = None  # stage -> why DVC's status was not asked
    sources: dict[str, str] | None = None  # source record kind -> its path
    bench_detached: str | None = None  # why a bench report was not attached (its stage is out of date)
    evidence: dict[str, dict[str, str | None]] | None = None  # kind -> {"path", "stage", "md5"} of the out that holds it
    unchecked_evidence: bool | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return _present({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DvcCheck:
        return cls(**{f.name: d.get(f.name) for f in fields(cls) if f.name != "checked"}, checked=bool(d.get("checked")))


@dataclass(frozen=True)
class ServedFile:
    """A file the release serves and the passed parity artifact whose sha256 it has."""

    sha256: str
    artifact: str


@dataclass(frozen=True)
class ParitySection:
    """The parity verdict for the files a release ships (``served``) and a summary per artifact of the report."""

    passed: bool  # "pass" in the JSON
    report: str
    served: dict[str, ServedFile] = field(default_factory=dict)
    not_shipped: dict[str, str] = field(default_factory=dict)  # artifact -> why it did not pass (it blocks nothing)
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)  # artifact -> the report's summary of it

    def to_json(self) -> dict[str, Any]:
        served = {n: {"sha256": s.sha256, "artifact": s.artifact} for n, s in self.served.items()}
        return {"pass": self.passed, "report": self.report, "served": served, "not_shipped": self.not_shipped, "artifacts": self.artifacts}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ParitySection:
        served = {str(n): ServedFile(str(s["sha256"]), str(s.get("artifact", "fp32"))) for n, s in (d.get("served") or {}).items()}
        return cls(bool(d.get("pass")), str(d.get("report", "")), served, dict(d.get("not_shipped") or {}), dict(d.get("artifacts") or {}))


@dataclass(frozen=True)
class BenchSection:
    """The bench summary when the report measured exactly the files shipped (``measured``), else why not (``absent``)."""

    status: str  # measured | absent
    reason: str | None = None
    report: str | None = None
    model_sha256: str | None = None
    configs_sha256: dict[str, str] | None = None  # config variant -> sha256 of the configs/<variant>.pbtxt measured
    summary: dict[str, Any] | None = None  # the bench report's own summary, as it wrote it

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    @classmethod
    def absent(cls, reason: str) -> BenchSection:
        return cls("absent", reason)

    def to_json(self) -> dict[str, Any]:
        return _present({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BenchSection:
        if "status" not in d:  # written before the bench was bound to the files: its summary, unchecked
            return cls("unchecked", summary=d)
        return cls(str(d["status"]), d.get("reason"), d.get("report"), d.get("model_sha256"), d.get("configs_sha256"), d.get("summary"))


@dataclass(frozen=True)
class SamplesSection:
    """The parity inputs a release ships for ``release canary`` to replay (``shipped``), else why not (``absent``)."""

    status: str  # shipped | absent
    reason: str | None = None
    file: str | None = None  # inside files/
    from_: str | None = None  # "from" in the JSON: where it was copied from
    sha256: str | None = None

    @classmethod
    def absent(cls, reason: str) -> SamplesSection:
        return cls("absent", reason)

    def to_json(self) -> dict[str, Any]:
        return _present({"status": self.status, "reason": self.reason, "file": self.file, "from": self.from_, "sha256": self.sha256})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SamplesSection:
        return cls(str(d.get("status", "absent")), d.get("reason"), d.get("file"), d.get("from"), d.get("sha256"))


@dataclass(frozen=True)
class EnvironmentInfo:
    """Where and with what the release was built."""

    python: str
    platform: str
    host: str
    user: str
    packages: dict[str, str]  # distribution -> version, for the packages that decide what a release contains

    def to_json(self) -> dict[str, Any]:
        return {"python": self.python, "platform": self.platform, "host": self.host, "user": self.user, "packages": self.packages}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EnvironmentInfo:
        return cls(str(d.get("python", "")), str(d.get("platform", "")), str(d.get("host", "")), str(d.get("user", "")), dict(d.get("packages") or {}))


DvcLockHashes = dict[str, dict[str, dict[str, str | None]]]  # stage -> "deps"|"outs" -> path -> md5


@dataclass(frozen=True)
class ReleaseSections:
    """What ``release build`` checked and records beside the files (the manifest's sections)."""

    git: GitInfo
    dvc: DvcCheck
    dvc_lock: DvcLockHashes
    parity: ParitySection
    bench: BenchSection
    environment: EnvironmentInfo
    gto_artifact: str  # the GTO artifact name its tags use
    samples: SamplesSection


# ---------------------------------------------------------------- the manifest
@dataclass(frozen=True)
class ReleaseManifest:
    """One release's manifest. The sections are None in a manifest written before they existed."""

    model: str
    version: int
    created_at: str  # ISO 8601, UTC
    source: Source
    files: FileTable
    git: GitInfo | None = None
    dvc: DvcCheck | None = None
    dvc_lock: DvcLockHashes | None = None
    parity: ParitySection | None = None
    bench: BenchSection | None = None
    environment: EnvironmentInfo | None = None
    gto_artifact: str | None = None  # {"gto": {"artifact": ...}} in the JSON
    samples: SamplesSection | None = None
    schema: int = SCHEMA

    @classmethod
    def new(cls, model: str, version: int, created_at: str, source: Source, files: FileTable, sections: ReleaseSections) -> ReleaseManifest:
        """The manifest of a release about to be written."""
        return cls(model, version, created_at, source, files, **{f.name: getattr(sections, f.name) for f in fields(sections)})

    @property
    def commit(self) -> str | None:
        """The git commit the release was built from (None outside git, or in a manifest without git)."""
        return self.git.commit if self.git else None

    @property
    def evidence_checked(self) -> bool:
        """Whether dvc.lock vouched for the release's evidence (False without a dvc section)."""
        return self.dvc is not None and self.dvc.checked

    def variants(self) -> list[str]:
        """The config variants the release carries: the ``configs/<name>.pbtxt`` its files list."""
        names = (k.removeprefix("configs/").removesuffix(".pbtxt") for k in self.files if k.startswith("configs/") and k.endswith(".pbtxt"))
        return sorted(n for n in names if "/" not in n)

    def inconsistencies(self) -> list[tuple[str, str]]:
        """(path, detail) wherever the evidence vouches for other bytes than the ``files`` table lists.

        A tampered file whose new sha256 was written into ``files`` still disagrees with the sha256 parity (and the
        bench) vouched for, which the manifest also records; on an unsigned store this is what catches it.
        """
        out = []
        for name, s in (self.parity.served if self.parity else {}).items():
            path = f"{self.version}/{name}"
            listed = self._sha(path)
            if listed != s.sha256:
                out.append((path, f"files lists sha256 {str(listed)[:12]}..., parity vouched for {s.sha256[:12]}..."))
        configs = (self.bench.configs_sha256 or {}) if self.bench is not None and self.bench.measured else {}
        for variant, sha in configs.items():
            path = f"configs/{variant}.pbtxt"
            listed = self._sha(path)
            if listed != sha:
                out.append((path, f"files lists sha256 {str(listed)[:12]}..., the bench measured {str(sha)[:12]}..."))
        return out

    def _sha(self, path: str) -> str | None:
        entry = self.files.get(path)
        return entry.sha256 if entry else None

    def to_json(self) -> dict[str, Any]:
        head = {"schema": self.schema, "model": self.model, "version": self.version, "created_at": self.created_at}
        sections = {
            "git": self.git.to_json() if self.git else None,
            "dvc": self.dvc.to_json() if self.dvc else None,
            "dvc_lock": self.dvc_lock,
            "parity": self.parity.to_json() if self.parity else None,
            "bench": self.bench.to_json() if self.bench else None,
            "environment": self.environment.to_json() if self.environment else None,
            "gto": {"artifact": self.gto_artifact} if self.gto_artifact is not None else None,
            "samples": self.samples.to_json() if self.samples else None,
        }
        return head | {"source": self.source.to_json(), "files": {k: v.to_json() for k, v in self.files.items()}} | _present(sections)

    def to_bytes(self) -> bytes:
        """The bytes ``manifest.json`` holds."""
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, d: object, where: str) -> ReleaseManifest:
        """The manifest in the JSON value ``d`` (read from ``where``, named in the error).

        Raises:
            ReleaseError: not a manifest of this schema, or a section that is not what its writer writes.
        """
        if not isinstance(d, dict) or d.get("schema") != SCHEMA or not isinstance(d.get("files"), dict):
            raise ReleaseError(f"not a release manifest (schema {SCHEMA}): {where}", fix=_RESTORE)
        model, version = d.get("model"), d.get("version")
        if not isinstance(model, str):
            raise ReleaseError(f"the manifest {where} names model {model!r}, which is not a model name a store holds", fix=_RESTORE)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ReleaseError(f"the manifest {where} names version {version!r} of '{model}', not a release number (an integer >= 1)", fix=_RESTORE)
        try:
            return cls(
                model=model,
                version=version,
                created_at=str(d.get("created_at", "")),
                source=Source.from_json(d.get("source") or {}),
                files={str(k): FileEntry.from_json(v) for k, v in d["files"].items()},
                git=GitInfo.from_json(d["git"]) if d.get("git") is not None else None,
                dvc=DvcCheck.from_json(d["dvc"]) if d.get("dvc") is not None else None,
                dvc_lock=d.get("dvc_lock"),
                parity=ParitySection.from_json(d["parity"]) if d.get("parity") is not None else None,
                bench=BenchSection.from_json(d["bench"]) if d.get("bench") is not None else None,
                environment=EnvironmentInfo.from_json(d["environment"]) if d.get("environment") is not None else None,
                gto_artifact=(d.get("gto") or {}).get("artifact"),
                samples=SamplesSection.from_json(d["samples"]) if d.get("samples") is not None else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ReleaseError(f"malformed release manifest {where}", fix=_RESTORE, details={"error": f"{type(e).__name__}: {e}"}) from None


def read_manifest(raw: bytes, where: str) -> ReleaseManifest:
    """Parse the bytes of a ``manifest.json``.

    Raises:
        ReleaseError: not JSON ("corrupt manifest"), or not a manifest (see :meth:`ReleaseManifest.from_json`).
    """
    try:
        d = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ReleaseError(f"corrupt manifest {where}", fix=_RESTORE, details={"error": e}) from None
    return ReleaseManifest.from_json(d, where)
