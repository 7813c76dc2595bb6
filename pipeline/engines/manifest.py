"""An engine manifest (pipeline/records/engine_manifest.py) against its fleet target: what it must say about the
target, the target it was built for, the check that refuses a mismatch, and the table of which targets have one."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from pipeline.core.atomic import file_digest
from pipeline.core.config import HardwareCompatibility, TargetConfig, TargetKind
from pipeline.core.errors import EngineError
from pipeline.engines.probe import name_matches
from pipeline.engines.targets import gpu_targets
from pipeline.records.engine_manifest import MANIFEST_NAME, EngineManifest, ExpectedTarget, read_manifest


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in chunks."""
    return file_digest(path)[0]


def expected_for(target: TargetConfig) -> ExpectedTarget:
    """What a manifest must say about its target (everything the repository stage needs to know of it)."""
    return ExpectedTarget(
        kind=TargetKind(target.kind),
        compute_capability=target.compute_capability,
        gpu_family=target.gpu_family,
        gpu_names=list(target.gpu_names),
        hardware_compatibility=HardwareCompatibility(target.builder.hardware_compatibility),
    )


def target_of(manifest: EngineManifest, name: str) -> TargetConfig:
    """The target a manifest was built for, as recorded in it (``name``: the fleet entry it stands for).

    The engine stage depends on ``target_specs.<name>``, so after ``dvc repro`` the recorded target is the
    configured one; the repository stage reads it from here and needs no dependency on every target's settings.
    """
    e = manifest.expected
    target = TargetConfig(name=name, kind=e.kind, gpu_family=e.gpu_family, compute_capability=e.compute_capability, gpu_names=list(e.gpu_names))
    target.builder.hardware_compatibility = e.hardware_compatibility
    return target


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
        plan = engine_dir / manifest.engine.file
        if not plan.is_file():
            problems["engine file"] = f"{plan} is missing"
        elif sha256_file(plan) != manifest.engine.sha256:
            problems["sha256"] = f"{plan} does not match the manifest's sha256"
    built_from = manifest.onnx.sha256 if manifest.onnx else None
    if onnx_sha256 is not None and built_from != onnx_sha256:
        problems["onnx"] = f"built from ONNX sha256 {built_from}, shipping {onnx_sha256}"
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
