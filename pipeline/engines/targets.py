"""GPU targets: resolve them from the config, check their settings, compute optimization profiles.

A profile gives every input a (min, opt, max) shape. It comes from the ONNX graph's
input dims and the target's ``profile`` section: the batch axis takes
``profile.batch``, every other named dynamic axis (e.g. ``sequence``) takes
``profile.dims.<axis>``, fixed dims stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.core.config import PipelineConfig, ProfileConfig, TargetConfig
from pipeline.core.errors import ConfigError, EngineError
from pipeline.core.specs import IOSpec

HARDWARE_COMPATIBILITY = ("none", "ampere_plus")

Shape = tuple[int, ...]


@dataclass(frozen=True)
class InputProfile:
    """min/opt/max shape of one input."""

    name: str
    min: Shape
    opt: Shape
    max: Shape

    def as_dict(self) -> dict[str, list[int]]:
        """JSON form used in manifests."""
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def resolve_target(cfg: PipelineConfig, name: str) -> TargetConfig:
    """The definition of target ``name``; it must be defined and in the fleet (``targets``)."""
    if name not in cfg.target_specs:
        raise ConfigError(
            f"target '{name}' is not defined",
            fix=f"choose from {sorted(cfg.target_specs)} or add conf/target/{name}.yaml and list it in conf/config.yaml",
        )
    if name not in cfg.targets:
        raise ConfigError(
            f"target '{name}' is not in the fleet targets={cfg.targets}",
            fix=f"add it: `dvc exp run -S targets='[{', '.join([*cfg.targets, name])}]'`",
        )
    target = cfg.target_specs[name]
    if target.name != name:
        raise ConfigError(
            f"target_specs.{name}.name is '{target.name}', not '{name}'",
            fix=f"set name: {name} in conf/target/{name}.yaml",
        )
    return target


def gpu_targets(cfg: PipelineConfig) -> list[TargetConfig]:
    """The GPU targets of the fleet, in fleet order."""
    return [cfg.target_specs[t] for t in cfg.targets if cfg.target_specs[t].kind == "gpu"]


def check_target(target: TargetConfig) -> None:
    """Settings a schema cannot check; raise ConfigError naming the key."""
    key = f"target_specs.{target.name}"
    if target.kind not in ("cpu", "gpu"):
        raise ConfigError(f"{key}.kind='{target.kind}' is not cpu or gpu", fix=f"set {key}.kind to cpu or gpu")
    if target.kind != "gpu":
        return
    cc = target.compute_capability or ""
    if not (cc.count(".") == 1 and all(p.isdigit() for p in cc.split("."))):
        raise ConfigError(f"{key}.compute_capability='{cc}' is not like '8.0'", fix="quote it in YAML: compute_capability: \"8.0\"")
    b = target.builder
    if b.hardware_compatibility not in HARDWARE_COMPATIBILITY:
        raise ConfigError(
            f"{key}.builder.hardware_compatibility='{b.hardware_compatibility}' is not one of {list(HARDWARE_COMPATIBILITY)}",
            fix=f"set {key}.builder.hardware_compatibility to none or ampere_plus",
        )
    if b.hardware_compatibility == "ampere_plus" and float(cc) < 8.0:
        raise ConfigError(
            f"{key}.builder.hardware_compatibility=ampere_plus needs an Ampere or newer GPU, target has {cc}",
            fix=f"set {key}.builder.hardware_compatibility=none",
        )
    if not 0 <= b.optimization_level <= 5:
        raise ConfigError(f"{key}.builder.optimization_level={b.optimization_level} is outside 0..5", fix="use 0..5 (3 is TensorRT's default)")
    if b.workspace_mb <= 0:
        raise ConfigError(f"{key}.builder.workspace_mb={b.workspace_mb} must be positive", fix="set it to e.g. 4096")
    _check_range(target.profile.batch, f"{key}.profile.batch")
    for axis, rng in target.profile.dims.items():
        _check_range(rng, f"{key}.profile.dims.{axis}")


def _check_range(rng: Sequence[int], key: str) -> None:
    if len(rng) != 3 or not all(isinstance(v, int) for v in rng) or not 1 <= rng[0] <= rng[1] <= rng[2]:
        raise ConfigError(f"{key}={list(rng)} is not [min, opt, max] with 1 <= min <= opt <= max", fix=f"set {key}=[1, 8, 32] or similar")


def compute_profiles(inputs: Sequence[IOSpec], profile: ProfileConfig, target_name: str, batch_axis: str = "batch") -> list[InputProfile]:
    """One (min, opt, max) shape per input from its ONNX dims and the target's profile ranges.

    The batch axis is the dim named ``batch_axis``, or an unnamed dynamic first dim.
    Raises EngineError naming the config key when a dynamic axis has no range.
    """
    key = f"target_specs.{target_name}.profile"
    _check_range(profile.batch, f"{key}.batch")
    out = []
    for spec in inputs:
        mins, opts, maxs = [], [], []
        for i, d in enumerate(spec.dims):
            if isinstance(d, int) and d > 0:
                rng = [d, d, d]
            elif d == batch_axis or (i == 0 and not isinstance(d, str)):
                rng = list(profile.batch)
            elif isinstance(d, str) and d in profile.dims:
                rng = list(profile.dims[d])
                _check_range(rng, f"{key}.dims.{d}")
            else:
                axis = d if isinstance(d, str) else f"<unnamed axis {i}>"
                raise EngineError(
                    f"input '{spec.name}' axis {i} ('{axis}') is dynamic but target '{target_name}' gives it no range",
                    fix=f"set {key}.dims.{axis}=[min, opt, max]" if isinstance(d, str) else "export the model with a named dynamic axis",
                    details={"input dims": list(spec.dims), "known axes": [batch_axis, *profile.dims]},
                )
            mins.append(rng[0])
            opts.append(rng[1])
            maxs.append(rng[2])
        out.append(InputProfile(spec.name, tuple(mins), tuple(opts), tuple(maxs)))
    return out


def max_batch(profiles: Sequence[InputProfile]) -> int:
    """The largest batch every input's profile accepts (axis 0)."""
    return min((p.max[0] for p in profiles if p.max), default=0)
