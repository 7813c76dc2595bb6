"""The repository's TensorRT Triton model from per-target engines: one config, one plan per GPU family.

The repository stage calls :func:`render_trt_model`. It takes every built engine whose
manifest matches its target and whose parity entry passed, and renders a
``platform: "tensorrt_plan"`` config with ``cc_model_filenames`` mapping each compute
capability to its plan (``"8.0" -> model.sm80.plan``). Skipped targets and engines that
failed parity are left out with a reason; a built engine whose manifest names another
target, GPU or plan is refused.

A GPU whose engine is missing or fails to load: a plan loads only on the compute capability
(and TensorRT version) that built it, unless it was built hardware-compatible. So
``default_model_filename`` names a plan only when one is hardware-compatible (``ampere_plus``:
it loads on every sm80+ GPU); otherwise it is left out, and on a GPU not in ``cc_model_filenames``
Triton finds no ``model.plan`` and the TensorRT model fails to load, cleanly, instead of
deserializing a plan built for another GPU. The ONNX Runtime model beside it (``<name>``, always
in the repository and gated by the same parity report) is the fallback: start Triton with
``--exit-on-error=false`` (or explicit model control) so that one failed model leaves the server
up, and send requests to ``<name>`` when ``<name>_trt`` is not ready. docs/engines-and-ci.md
says the same for operators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.repository import config as triton_config
from pipeline.core.config import TargetConfig, VariantConfig
from pipeline.engines.manifest import check_matches_target, target_of
from pipeline.core.errors import EngineError, ParityError, RepositoryError
from pipeline.engines.probe import sm_tag
from pipeline.engines.targets import InputProfile, max_batch
from pipeline.core.specs import IOSpec
from pipeline.records.engine_manifest import MANIFEST_NAME, EngineManifest, read_manifest
from pipeline.records.parity import ParityReport, read_report


@dataclass
class TrtModel:
    """The rendered TensorRT model: its config, the files to copy, and what was left out."""

    config: Optional[mc.ModelConfig]  # None when no engine is shippable
    files: list[tuple[Path, str]] = field(default_factory=list)  # (source plan, path inside the model dir)
    included: dict[str, str] = field(default_factory=dict)  # target -> plan file name
    excluded: dict[str, str] = field(default_factory=dict)  # target -> reason
    notes: list[str] = field(default_factory=list)  # what the operator must know to serve it
    not_gpu: list[str] = field(default_factory=list)  # fleet targets whose manifest says they are no GPU target
    precision: dict[str, str] = field(default_factory=dict)  # target -> precision of the ONNX its plan was built from


# ---------------------------------------------------------------- parity lookup
def engine_parity(report: Optional[ParityReport], target: str) -> tuple[bool, str]:
    """Did target's engine pass the parity gate? Returns (passed, why).

    The parity stage writes one ``trt@<target>`` entry per engine manifest in
    ``artifacts/reports/parity.json``; :meth:`pipeline.records.parity.ParityReport.verdict` reads it
    (skipped, errored, failed or missing all count as not passed).
    """
    if report is None:
        return False, "no parity report"
    return report.verdict(f"trt@{target}")


def load_parity(path: Optional[Path]) -> Optional[ParityReport]:
    """Read the parity report, or None when the path is None or the file is absent."""
    if path is None or not path.is_file():
        return None
    try:
        return read_report(path)
    except ParityError as e:
        raise RepositoryError(f"cannot use the parity report {path}: {e.what}", fix=e.fix or "rerun the parity stage: dvc repro parity") from None


# ---------------------------------------------------------------- rendering
def plan_name(target: TargetConfig) -> str:
    """File name of target's plan inside the version directory, e.g. model.sm80.plan."""
    assert target.compute_capability
    return f"model.{sm_tag(target.compute_capability)}.plan"


def _io(manifest_io: Sequence[Mapping[str, Any]]) -> list[IOSpec]:
    return [IOSpec(str(s["name"]), str(s["dtype"]), tuple(s["dims"])) for s in manifest_io]


@dataclass(frozen=True)
class _Engine:
    """A built engine that matches its target and passed parity: it ships."""

    target: TargetConfig
    manifest: EngineManifest
    plan: Path


def render_trt_model(
    model_name: str,
    engine_dirs: Mapping[str, Path],
    variant: VariantConfig,
    parity_report: Optional[ParityReport],
    version: int = 1,
) -> TrtModel:
    """Render the TensorRT Triton model for every shippable engine.

    Everything about a target (compute capability, GPU names, hardware compatibility, precision) and the
    graph's inputs and outputs comes from the engine manifests, and the ONNX an engine must have been
    built from is the one the parity report compared for its precision (the ``fp16``, ``int8`` or
    ``fp32`` entry's sha256): the repository stage depends on neither every target's settings nor those files.

    Args:
        model_name: Triton model name (e.g. ``minilm_trt``).
        engine_dirs: fleet target name -> ``artifacts/engines/<target>`` (each holds manifest.json [+ model.plan]).
        variant: the scheduling variant (max_batch_size, instance_count, dynamic_batching).
        parity_report: the parity report (None = nothing passed parity).
        version: the model version directory the plans go to.

    Returns:
        TrtModel: ``config`` is None when nothing is shippable; ``files`` are
        (source plan, ``"<version>/model.smXY.plan"``) pairs to copy into the model directory.

    Raises:
        EngineError: a built engine's manifest does not match its target (name, compute
            capability, GPU name, plan sha256, source ONNX sha256), or two targets share a
            compute capability.
        RepositoryError: max_batch_size exceeds an engine's profile, or the graph has no batch axis.
    """
    out = TrtModel(config=None)
    ships = {name: e for name, d in engine_dirs.items() if (e := _shippable(name, Path(d), parity_report, out)) is not None}
    by_cc = _by_compute_capability(ships)
    for name, e in ships.items():
        out.included[name] = plan_name(e.target)
        out.precision[name] = e.manifest.precision
        out.files.append((e.plan, f"{version}/{plan_name(e.target)}"))
        if (e.manifest.settings or {}).get("version_compatible"):
            out.notes.append(f"{plan_name(e.target)} is version-compatible: start Triton with --backend-config=tensorrt,version-compatible=true")
    if not out.included:
        return out
    _check_max_batch(variant, {name: max_batch([InputProfile.from_dict(i, p) for i, p in e.manifest.profiles.items()]) for name, e in ships.items()})
    io = next((e.manifest.io for e in ships.values() if e.manifest.io), {})
    if not io.get("inputs") or not io.get("outputs"):
        raise EngineError("the engine manifests record no graph inputs/outputs (built by an older version)", fix="rebuild the engines: dvc repro -f engine@<target>")
    cfg = triton_config.base_config(model_name, _io(io["inputs"]), _io(io["outputs"]), variant, f"variants.{variant.name}", "gpu")
    cfg.platform = "tensorrt_plan"
    for cc, name in sorted(by_cc.items(), key=lambda kv: float(kv[0])):
        cfg.cc_model_filenames[cc] = out.included[name]
    _default_plan(cfg, out, by_cc, {name: e.target for name, e in ships.items()})
    out.config = cfg
    return out


def _shippable(name: str, engine_dir: Path, parity_report: Optional[ParityReport], out: TrtModel) -> _Engine | None:
    """Target ``name``'s engine if it ships; else None, with why recorded in ``out`` (excluded, or not a GPU target).

    Raises EngineError when a built engine's manifest does not match its target.
    """
    if not (engine_dir / MANIFEST_NAME).is_file():
        # In CI's assemble job a family whose runner did not report has no engine dir at all.
        out.excluded[name] = f"no engine: {engine_dir / MANIFEST_NAME} is absent (dvc repro engine@{name} or dvc pull)"
        return None
    manifest = read_manifest(engine_dir / MANIFEST_NAME)
    target = target_of(manifest, name)
    if target.kind != "gpu":
        out.not_gpu.append(name)
        return None
    if not manifest.built or manifest.engine is None:
        out.excluded[name] = f"skipped: {manifest.reason}"
        return None
    compared = parity_report.artifacts.get(manifest.precision) if parity_report is not None else None
    onnx_sha = compared.sha256 if compared is not None else None
    check_matches_target(manifest, target, engine_dir, onnx_sha)
    passed, why = engine_parity(parity_report, name)
    if passed and not onnx_sha:
        passed, why = False, (f"the parity report has no {manifest.precision} entry, so nothing says which {manifest.precision.upper()} ONNX the engine must come from")
    if not passed:
        out.excluded[name] = f"not shipped: {why}"
        return None
    return _Engine(target, manifest, engine_dir / manifest.engine.file)


def _by_compute_capability(ships: Mapping[str, _Engine]) -> dict[str, str]:
    """``{compute capability: target}``; raises EngineError when two targets share one (Triton keys plans by it)."""
    by_cc: dict[str, str] = {}
    for name, e in ships.items():
        cc = str(e.target.compute_capability)
        if cc in by_cc:
            raise EngineError(
                f"targets '{by_cc[cc]}' and '{name}' both map compute capability {cc}; Triton keys plans by capability",
                fix=f"keep one of them in targets, e.g. drop '{name}'",
            )
        by_cc[cc] = name
    return by_cc


def _check_max_batch(variant: VariantConfig, max_batches: Mapping[str, int]) -> None:
    """Raise RepositoryError when the variant's max_batch_size exceeds an engine's profile."""
    too_small = {t: b for t, b in max_batches.items() if variant.max_batch_size > b}
    if too_small:
        raise RepositoryError(
            f"max_batch_size={variant.max_batch_size} of variant '{variant.name}' exceeds the engines' profile max batch {too_small}",
            fix="raise target_specs.<target>.profile.batch[2] and rebuild, or lower variants.<name>.max_batch_size",
        )


def _default_plan(cfg: mc.ModelConfig, out: TrtModel, by_cc: Mapping[str, str], targets: Mapping[str, TargetConfig]) -> None:
    """Set ``default_model_filename`` to the hardware-compatible plan, if any, and note what a GPU not listed gets."""
    portable = _portable_target(by_cc, targets)
    if portable is not None:
        cfg.default_model_filename = out.included[portable]
        out.notes.append(
            f"default_model_filename {out.included[portable]} is hardware-compatible (ampere_plus): GPUs of compute capability 8.0+ not listed in cc_model_filenames load it"
        )
    else:
        out.notes.append(
            "no default_model_filename: no plan is hardware-compatible, and a plan built for another GPU does not "
            "load. A GPU not in cc_model_filenames fails to load this model; the ONNX Runtime model beside it "
            "is the fallback (start Triton with --exit-on-error=false)"
        )


def _portable_target(by_cc: Mapping[str, str], targets: Mapping[str, TargetConfig]) -> str | None:
    """The plan for GPUs not listed in cc_model_filenames: the lowest-capability hardware-compatible (Ampere+) one,
    which loads on every sm80+ GPU; None when no plan is (a plan loads only on the GPU that built it)."""
    names = [by_cc[cc] for cc in sorted(by_cc, key=float)]
    portable = [n for n in names if targets[n].builder.hardware_compatibility == "ampere_plus"]
    return portable[0] if portable else None
