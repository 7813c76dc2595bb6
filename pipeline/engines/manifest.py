"""The manifest written beside every TensorRT engine (or in place of one that was skipped).

``artifacts/engines/<target>/manifest.json`` says whether the engine was ``built`` or
``skipped`` and why, on which GPU / driver / CUDA / TensorRT, with which profiles and
builder settings, how long it took, and the plan's size and sha256, plus how to
reproduce it (``dvc repro engine@<target>``, and for a built engine the same build as
``polygraphy convert`` and ``trtexec`` commands). The repository step refuses an engine
whose manifest does not match its target.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from pipeline.core.atomic import file_digest, read_json, write_json
from pipeline.core.config import TargetConfig
from pipeline.core.errors import EngineError
from pipeline.engines.probe import name_matches
from pipeline.engines.targets import gpu_targets

MANIFEST_SCHEMA = 1
MANIFEST_NAME = "manifest.json"
PLAN_NAME = "model.plan"
STATUSES = ("built", "skipped")


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in chunks."""
    return file_digest(path)[0]


@dataclass
class EngineManifest:
    """One target's engine record (see module docstring)."""

    target: str
    status: str  # built | skipped
    reason: str
    expected: dict[str, Any]  # the target's kind, compute_capability, gpu_family, gpu_names, hardware_compatibility
    # The precision of the ONNX the engine is built from (fp16, fp32, or int8: the QDQ file); manifests written before
    # INT8 existed were all built from the FP16 ONNX.
    precision: str = "fp16"
    machine: dict[str, Any] = field(default_factory=dict)  # gpu_name, compute_capability, driver/CUDA/TensorRT versions
    onnx: dict[str, Any] = field(default_factory=dict)  # path, sha256
    # The graph's inputs and outputs ({name, dtype, dims}): the repository renders the TensorRT model's
    # config from them, so it never needs to read the FP16 ONNX itself.
    io: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    profiles: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    settings: Optional[dict[str, Any]] = None
    engine: Optional[dict[str, Any]] = None  # file, bytes, sha256
    build_time_s: Optional[float] = None
    timing_cache: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reproduce: dict[str, str] = field(default_factory=dict)  # dvc [, polygraphy, trtexec]
    schema: int = MANIFEST_SCHEMA

    @property
    def built(self) -> bool:
        """True when a plan file was built."""
        return self.status == "built"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (key order fixed, so an unchanged skip writes identical bytes)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "manifest") -> EngineManifest:
        """Parse and check a manifest dict; raise EngineError on a malformed one."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        missing = [k for k in ("target", "status", "reason", "expected") if k not in data]
        if unknown or missing:
            raise EngineError(
                f"{origin} is not an engine manifest",
                fix="rebuild it: dvc repro engine@<target>",
                details={"unknown keys": unknown, "missing keys": missing},
            )
        m = cls(**data)
        if m.status not in STATUSES:
            raise EngineError(f"{origin}: status '{m.status}' is not one of {list(STATUSES)}", fix="rebuild it: dvc repro engine@<target>")
        if m.built and not (m.engine and m.engine.get("file") and m.engine.get("sha256")):
            raise EngineError(f"{origin}: status built but no engine file/sha256 recorded", fix="rebuild it: dvc repro engine@<target>")
        return m


def expected_for(target: TargetConfig) -> dict[str, Any]:
    """What a manifest must say about its target (everything the repository stage needs to know of it)."""
    return {
        "kind": str(target.kind),
        "compute_capability": target.compute_capability,
        "gpu_family": target.gpu_family,
        "gpu_names": list(target.gpu_names),
        "hardware_compatibility": str(target.builder.hardware_compatibility),
    }


def target_of(manifest: EngineManifest, name: str) -> TargetConfig:
    """The target a manifest was built for, as recorded in it (``name``: the fleet entry it stands for).

    The engine stage depends on ``target_specs.<name>``, so after ``dvc repro`` the recorded target is the
    configured one; the repository stage reads it from here and needs no dependency on every target's settings.
    """
    e = manifest.expected
    target = TargetConfig(
        name=name,
        kind=e.get("kind", "gpu"),
        gpu_family=e.get("gpu_family"),
        compute_capability=e.get("compute_capability"),
        gpu_names=list(e.get("gpu_names") or []),
    )
    target.builder.hardware_compatibility = e.get("hardware_compatibility", "none")
    return target


def write_manifest(path: str | os.PathLike[str], manifest: EngineManifest) -> None:
    """Atomically write ``manifest`` as JSON."""
    write_json(path, manifest.to_dict())


def read_manifest(path: str | os.PathLike[str]) -> EngineManifest:
    """Read a manifest; raise EngineError if missing or malformed."""
    p = Path(path)
    data = read_json(p, EngineError, "engine manifest", "run the engine stage: dvc repro engine@<target> (or dvc pull)")
    if not isinstance(data, dict):
        raise EngineError(f"{p} is not a JSON object", fix="rebuild it: dvc repro engine@<target>")
    return EngineManifest.from_dict(data, origin=str(p))


def check_matches_target(manifest: EngineManifest, target: TargetConfig, engine_dir: Optional[Path] = None, onnx_sha256: Optional[str] = None) -> None:
    """Refuse a built engine whose manifest does not belong to ``target``.

    Checks the target name, the compute capability the engine was built on, the GPU
    name patterns, (given ``engine_dir``) that the plan file's sha256 is the recorded
    one, and (given ``onnx_sha256``) that it was built from that ONNX file. Raises
    EngineError with both values and the fix.
    """
    where = f"engine manifest of target '{target.name}'"
    fix = f"rebuild on a {target.gpu_family or target.name} runner: dvc repro engine@{target.name}, then dvc push"
    problems: dict[str, object] = {}
    if manifest.target != target.name:
        problems["target"] = f"manifest says '{manifest.target}', expected '{target.name}'"
    if not manifest.built:
        problems["status"] = f"'{manifest.status}' ({manifest.reason})"
    built_cc = str(manifest.machine.get("compute_capability"))
    if built_cc != str(target.compute_capability):
        problems["compute_capability"] = f"built on {built_cc}, target needs {target.compute_capability}"
    gpu_name = str(manifest.machine.get("gpu_name", ""))
    if not name_matches(gpu_name, list(target.gpu_names)):
        problems["gpu_name"] = f"built on '{gpu_name}', target accepts {list(target.gpu_names)}"
    if engine_dir is not None and manifest.engine:
        plan = engine_dir / manifest.engine["file"]
        if not plan.is_file():
            problems["engine file"] = f"{plan} is missing"
        elif sha256_file(plan) != manifest.engine["sha256"]:
            problems["sha256"] = f"{plan} does not match the manifest's sha256"
    if onnx_sha256 is not None and manifest.onnx.get("sha256") != onnx_sha256:
        problems["onnx"] = f"built from ONNX sha256 {manifest.onnx.get('sha256')}, shipping {onnx_sha256}"
    if problems:
        raise EngineError(f"{where} does not match the target; refusing to ship it", fix=fix, details=problems)


def engine_dirs_for(targets: Sequence[str], specs: Mapping[str, TargetConfig], engines_root: Path) -> dict[str, Path]:
    """``{target: engines_root/target}`` for the fleet's GPU targets."""
    return {t.name: engines_root / t.name for t in gpu_targets(targets, specs)}


def targets_table(engine_dirs: Mapping[str, Path], included: Mapping[str, str] | None = None, excluded: Mapping[str, str] | None = None) -> str:
    """A Markdown table of which targets have an engine (for the CI summary and the stage log).

    ``included``/``excluded`` come from the repository's TensorRT model (target -> plan file / reason) when known.
    """
    rows = ["| target | status | GPU | TensorRT | shipped | reason |", "|---|---|---|---|---|---|"]
    for name, d in engine_dirs.items():
        try:
            m = read_manifest(Path(d) / MANIFEST_NAME)
        except EngineError as e:
            rows.append(f"| {name} | missing | | | no | {e.what} |")
            continue
        shipped = "yes" if included and name in included else "no"
        reason = (excluded or {}).get(name) or m.reason
        rows.append(f"| {name} | {m.status} | {m.machine.get('gpu_name') or ''} | {m.machine.get('tensorrt_version') or ''} | {shipped} | {reason.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
