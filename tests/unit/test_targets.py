"""Targets: resolution from the composed config, setting checks, optimization-profile computation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.core.config import ProfileConfig, TargetConfig, load_config
from pipeline.core.errors import ConfigError, EngineError
from pipeline.core.specs import IOSpec
from pipeline.engines.targets import check_target, compute_profiles, gpu_targets, max_batch, resolve_target

GPU_TARGETS = {"t4": "7.5", "a100": "8.0", "a10": "8.6", "l4": "8.9", "h100": "9.0"}


def test_every_gpu_family_is_defined_with_its_compute_capability(make_params: Callable[..., Path]) -> None:
    cfg = load_config(make_params())
    for name, cc in GPU_TARGETS.items():
        t = cfg.target_specs[name]
        assert (t.kind, t.compute_capability, t.precision) == ("gpu", cc, "fp16")
        assert t.gpu_names, f"{name} should restrict GPU names"
        check_target(t)  # the shipped settings are valid
    assert cfg.target_specs["cpu"].kind == "cpu"


def test_fleet_selection_and_resolution(make_params: Callable[..., Path]) -> None:
    cfg = load_config(make_params("targets=[cpu,h100,a100]"))
    assert [t.name for t in gpu_targets(cfg)] == ["h100", "a100"]  # fleet order
    assert resolve_target(cfg, "a100").compute_capability == "8.0"
    with pytest.raises(ConfigError, match="not in the fleet"):
        resolve_target(cfg, "t4")
    with pytest.raises(ConfigError, match="not defined"):
        resolve_target(cfg, "v100")


def test_unknown_target_in_fleet_fails_at_load(make_params: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="no definition"):
        load_config(make_params("targets=[cpu,v100]"))


def test_profile_follows_model_seq_len(make_params: Callable[..., Path]) -> None:
    cfg = load_config(make_params("model.seq_len=64"))
    assert cfg.target_specs["a100"].profile.dims["sequence"] == [1, 64, 256]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"hardware_compatibility": "turing_plus"}, "hardware_compatibility"),
        ({"optimization_level": 7}, "optimization_level"),
        ({"workspace_mb": 0}, "workspace_mb"),
    ],
)
def test_bad_builder_settings_name_the_key(change: dict[str, object], key: str) -> None:
    t = TargetConfig(name="a100", kind="gpu", compute_capability="8.0")
    for k, v in change.items():
        setattr(t.builder, k, v)
    with pytest.raises(ConfigError, match=f"target_specs.a100.builder.{key}"):
        check_target(t)


def test_ampere_plus_refused_below_ampere() -> None:
    t = TargetConfig(name="t4", kind="gpu", compute_capability="7.5")
    t.builder.hardware_compatibility = "ampere_plus"
    with pytest.raises(ConfigError, match="Ampere"):
        check_target(t)


def test_bad_compute_capability_and_range() -> None:
    with pytest.raises(ConfigError, match="compute_capability"):
        check_target(TargetConfig(name="x", kind="gpu", compute_capability="80"))
    t = TargetConfig(name="x", kind="gpu", compute_capability="8.0", profile=ProfileConfig(batch=[8, 1, 32]))
    with pytest.raises(ConfigError, match=r"profile.batch"):
        check_target(t)


def test_profiles_from_onnx_dims_and_target_ranges() -> None:
    inputs = [
        IOSpec("input_ids", "int64", ("batch", "sequence")),
        IOSpec("attention_mask", "int64", ("batch", "sequence")),
        IOSpec("image", "float32", ("batch", 3, 32, 32)),
    ]
    prof = ProfileConfig(batch=[1, 8, 32], dims={"sequence": [1, 128, 256]})
    out = compute_profiles(inputs, prof, "a100")
    assert [p.name for p in out] == ["input_ids", "attention_mask", "image"]
    assert (out[0].min, out[0].opt, out[0].max) == ((1, 1), (8, 128), (32, 256))
    assert (out[2].min, out[2].opt, out[2].max) == ((1, 3, 32, 32), (8, 3, 32, 32), (32, 3, 32, 32))
    assert out[0].as_dict() == {"min": [1, 1], "opt": [8, 128], "max": [32, 256]}
    assert max_batch(out) == 32


def test_unnamed_dynamic_first_axis_is_the_batch() -> None:
    out = compute_profiles([IOSpec("x", "float32", (None, 16))], ProfileConfig(batch=[2, 4, 8]), "l4")
    assert (out[0].min, out[0].max) == ((2, 16), (8, 16))


def test_dynamic_axis_without_range_names_the_key() -> None:
    with pytest.raises(EngineError, match=r"target_specs\.h100\.profile\.dims\.sequence"):
        compute_profiles([IOSpec("ids", "int64", ("batch", "sequence"))], ProfileConfig(), "h100")


def test_custom_batch_axis_name() -> None:
    out = compute_profiles([IOSpec("x", "float32", ("N", 4))], ProfileConfig(batch=[1, 2, 3]), "a10", batch_axis="N")
    assert out[0].max == (3, 4)
