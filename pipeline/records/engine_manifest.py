"""The manifest written beside every TensorRT engine (or in place of one that was skipped).

``artifacts/engines/<target>/manifest.json`` says whether the engine was ``built`` or
``skipped`` and why, on which GPU / driver / CUDA / TensorRT, with which profiles and
builder settings, how long it took, and the plan's size and sha256, plus how to
reproduce it (``dvc repro engine@<target>``, and for a built engine the same build as
``polygraphy convert`` and ``trtexec`` commands). The engine stage writes it
(pipeline/engines/build.py); the parity and repository stages read it, and the repository
refuses an engine whose manifest does not match its target (pipeline/engines/manifest.py).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from pipeline.core.atomic import read_json, write_json
from pipeline.core.config import HardwareCompatibility, TargetKind
from pipeline.core.errors import EngineError

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
PLAN_NAME = "model.plan"
STATUSES = ("built", "skipped")
_FIX = "rebuild it: dvc repro engine@<target>"


@dataclass(frozen=True)
class ExpectedTarget:
    """What the manifest says about the target it was built for: everything the repository stage needs to know of it."""

    kind: TargetKind = TargetKind.gpu
    compute_capability: Optional[str] = None
    gpu_family: Optional[str] = None
    gpu_names: list[str] = field(default_factory=list)
    hardware_compatibility: HardwareCompatibility = HardwareCompatibility.none

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExpectedTarget:
        """Raises TypeError (unknown keys) or ValueError (a kind or compatibility level that is no member)."""
        d = dict(data)
        return cls(**d | {"kind": TargetKind(d.get("kind", "gpu")), "hardware_compatibility": HardwareCompatibility(d.get("hardware_compatibility", "none"))})


@dataclass(frozen=True)
class OnnxSource:
    """The ONNX file the engine is built from (sha256 None: the file was absent)."""

    path: str
    sha256: Optional[str]


@dataclass(frozen=True)
class EngineFile:
    """The plan file beside the manifest."""

    file: str
    bytes: int
    sha256: str


@dataclass
class EngineManifest:
    """One target's engine record (see module docstring). Field order is the file's key order, so an unchanged skip
    writes identical bytes."""

    target: str
    status: str  # built | skipped
    reason: str
    expected: ExpectedTarget
    # The precision of the ONNX the engine is built from (fp16, fp32, or int8: the QDQ file); manifests written before
    # INT8 existed were all built from the FP16 ONNX.
    precision: str = "fp16"
    # The probe's description of the GPU it was built on (gpu_name, compute_capability, gpu_index, gpus_present and the
    # driver/CUDA/TensorRT versions), as the probe stage reports it.
    machine: dict[str, Any] = field(default_factory=dict)
    onnx: Optional[OnnxSource] = None
    # The graph's inputs and outputs ({name, dtype, dims}): the repository renders the TensorRT model's
    # config from them, so it never needs to read the ONNX itself.
    io: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    profiles: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # input -> {min, opt, max}
    settings: Optional[dict[str, Any]] = None  # the builder settings TensorRT was given
    engine: Optional[EngineFile] = None
    build_time_s: Optional[float] = None
    timing_cache: dict[str, Any] = field(default_factory=dict)  # path [, loaded, bytes]
    notes: list[str] = field(default_factory=list)
    reproduce: dict[str, str] = field(default_factory=dict)  # dvc [, polygraphy, trtexec]
    schema: int = SCHEMA_VERSION

    @property
    def built(self) -> bool:
        """True when a plan file was built."""
        return self.status == "built"

    def to_json(self) -> dict[str, Any]:
        """The manifest file's JSON."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], origin: str = "manifest") -> EngineManifest:
        """Parse and check a manifest; raise EngineError on a malformed one (unknown or missing keys, a status not in
        :data:`STATUSES`, a built engine without its plan's file and sha256, a schema this code does not read)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        missing = [k for k in ("target", "status", "reason", "expected") if k not in data]
        if unknown or missing:
            raise EngineError(f"{origin} is not an engine manifest", fix=_FIX, details={"unknown keys": unknown, "missing keys": missing})
        if data.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise EngineError(f"{origin}: schema {data.get('schema')!r} is not {SCHEMA_VERSION}", fix=_FIX)
        try:
            m = cls(
                **{
                    **data,
                    "expected": ExpectedTarget.from_json(data["expected"]),
                    "onnx": OnnxSource(**data["onnx"]) if data.get("onnx") else None,
                    "engine": EngineFile(**data["engine"]) if data.get("engine") else None,
                }
            )
        except (TypeError, ValueError) as e:  # a nested section with unknown or missing keys, or values no member of its set
            raise EngineError(f"{origin} is not an engine manifest", fix=_FIX, details={"error": str(e)}) from None
        if m.status not in STATUSES:
            raise EngineError(f"{origin}: status '{m.status}' is not one of {list(STATUSES)}", fix=_FIX)
        if m.built and not (m.engine and m.engine.file and m.engine.sha256):
            raise EngineError(f"{origin}: status built but no engine file/sha256 recorded", fix=_FIX)
        return m


def write_manifest(path: str | os.PathLike[str], manifest: EngineManifest) -> None:
    """Atomically write ``manifest`` as JSON."""
    write_json(path, manifest.to_json())


def read_manifest(path: str | os.PathLike[str]) -> EngineManifest:
    """Read a manifest; raise EngineError if missing or malformed."""
    p = Path(path)
    data = read_json(p, EngineError, "engine manifest", "run the engine stage: dvc repro engine@<target> (or dvc pull)")
    if not isinstance(data, dict):
        raise EngineError(f"{p} is not a JSON object", fix=_FIX)
    return EngineManifest.from_json(data, origin=str(p))
