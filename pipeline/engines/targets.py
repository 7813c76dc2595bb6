"""GPU targets: resolve the stage's target from the config, the fleet's GPU targets, optimization profiles.

A profile gives every input a (min, opt, max) shape. It comes from the ONNX graph's
input dims and the target's ``profile`` section: the batch axis takes
``profile.batch``, every other named dynamic axis (e.g. ``sequence``) takes
``profile.dims.<axis>``, fixed dims stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.core.config import PipelineConfig, ProfileConfig, TargetConfig
from pipeline.core.errors import ConfigError, EngineError
from pipeline.core.specs import IOSpec, typeable

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

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Sequence[int]]) -> InputProfile:
        """The inverse of :meth:`as_dict` (a manifest's ``profiles[name]``)."""
        return cls(name, tuple(data["min"]), tuple(data["opt"]), tuple(data["max"]))


def resolve_target(cfg: PipelineConfig, name: str) -> TargetConfig:
    """The definition of target ``name`` (the stage's ``--target`` argument).

    The config's own values were checked at composition; this checks only the argument. Raises ConfigError
    when ``name`` is not defined or not in the fleet (``targets``).
    """
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
    return cfg.target_specs[name]


def gpu_targets(targets: Sequence[str], specs: Mapping[str, TargetConfig]) -> list[TargetConfig]:
    """The GPU targets of the fleet ``targets`` (``cfg.targets``, ``cfg.target_specs``), in fleet order: the ones
    that get a TensorRT engine."""
    return [specs[t] for t in targets if specs[t].kind == "gpu"]


def compute_profiles(inputs: Sequence[IOSpec], profile: ProfileConfig, target_name: str, batch_axis: str = "batch") -> list[InputProfile]:
    """One (min, opt, max) shape per input from its ONNX dims and the target's profile ranges.

    The batch axis is the dim named ``batch_axis``, or an unnamed dynamic first dim.
    Raises EngineError naming the config key when a dynamic axis has no range.
    """
    # The ranges themselves were checked at composition (pipeline.core.config); what only the graph can tell
    # is whether every dynamic axis has one.
    key = f"target_specs.{target_name}.profile"
    out = []
    for spec in inputs:
        mins, opts, maxs = [], [], []
        for i, d in enumerate(spec.dims):
            if isinstance(d, int) and d > 0:
                rng = [d, d, d]
            elif d == batch_axis or (i == 0 and not isinstance(d, str)):
                rng = list(profile.batch)
            elif isinstance(d, str) and (d in profile.dims or typeable(d) in profile.dims):
                rng = list(profile.dims[d] if d in profile.dims else profile.dims[typeable(d)])
            else:
                axis = d if isinstance(d, str) else f"<unnamed axis {i}>"
                raise EngineError(
                    f"input '{spec.name}' axis {i} ('{axis}') is dynamic but target '{target_name}' gives it no range",
                    # A name with dots (p2o.DynamicDimension.0) is no Hydra key path: its typeable spelling is.
                    fix=f"set +{key}.dims.{typeable(axis)}=[min, opt, max]" if isinstance(d, str) else "export the model with a named dynamic axis",
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
