"""Targets: resolution from the composed config, the fleet's GPU targets, optimization-profile computation.

The targets' settings are checked at composition (pipeline/core/config, tests/core/test_config_checks.py);
the engine code no longer re-checks them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.core.config import ProfileConfig, load_config
from pipeline.core.errors import ConfigError, EngineError
from pipeline.core.specs import IOSpec
from pipeline.engines.targets import InputProfile, compute_profiles, gpu_targets, max_batch, resolve_target
from pipeline.params import compose

GPU_TARGETS = {"t4": "7.5", "a100": "8.0", "a10": "8.6", "l4": "8.9", "h100": "9.0"}


def test_every_gpu_family_is_defined_with_its_compute_capability(make_params: Callable[..., Path]) -> None:
    cfg = load_config(make_params())  # composition checked every target's settings: the shipped ones are valid
    for name, cc in GPU_TARGETS.items():
        t = cfg.target_specs[name]
        assert (t.kind, t.compute_capability, t.precision) == ("gpu", cc, "fp16")
        assert t.gpu_names, f"{name} should restrict GPU names"
    assert cfg.target_specs["cpu"].kind == "cpu"


def test_fleet_selection_and_resolution(make_params: Callable[..., Path]) -> None:
    cfg = load_config(make_params("targets=[cpu,h100,a100]"))
    assert [t.name for t in gpu_targets(cfg.targets, cfg.target_specs)] == ["h100", "a100"]  # fleet order
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


def test_bad_hardware_compatibility_fails_at_composition_naming_the_key() -> None:
    """Was check_target's; the other removed check_target/_check_range cases are exact cases of
    tests/core/test_config_checks.py (test_ranges, test_cross_field_rules)."""
    with pytest.raises(ConfigError, match=r"target_specs\.a100\.builder\.hardware_compatibility"):
        compose(["target_specs.a100.builder.hardware_compatibility=turing_plus"])


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
    assert [InputProfile.from_dict(p.name, p.as_dict()) for p in out] == out  # a manifest's profiles read back


def test_unnamed_dynamic_first_axis_is_the_batch() -> None:
    out = compute_profiles([IOSpec("x", "float32", (None, 16))], ProfileConfig(batch=[2, 4, 8]), "l4")
    assert (out[0].min, out[0].max) == ((2, 16), (8, 16))


def test_dynamic_axis_without_range_names_the_key() -> None:
    with pytest.raises(EngineError, match=r"target_specs\.h100\.profile\.dims\.sequence"):
        compute_profiles([IOSpec("ids", "int64", ("batch", "sequence"))], ProfileConfig(), "h100")


def test_custom_batch_axis_name() -> None:
    out = compute_profiles([IOSpec("x", "float32", ("N", 4))], ProfileConfig(batch=[1, 2, 3]), "a10", batch_axis="N")
    assert out[0].max == (3, 4)


def test_a_dotted_axis_name_gets_a_key_hydra_can_type() -> None:
    """Issue 28, finding 6: PaddlePaddle names axes p2o.DynamicDimension.0; the suggested key must compose."""
    import yaml

    from pipeline.core.errors import EngineError
    from pipeline.params import compose

    inputs = [IOSpec("x", "float32", ("batch", 3, "p2o.DynamicDimension.0", 320))]
    with pytest.raises(EngineError) as e:
        compute_profiles(inputs, ProfileConfig(batch=[1, 4, 8]), "a100")
    fix = e.value.fix or ""
    assert fix == "set +target_specs.a100.profile.dims.p2o_DynamicDimension_0=[min, opt, max]", fix
    key = fix.removeprefix("set ").replace("[min, opt, max]", "[32,320,960]")
    dims = yaml.safe_load(compose(["targets=[cpu,a100]", key]))["target_specs"]["a100"]["profile"]["dims"]
    out = compute_profiles(inputs, ProfileConfig(batch=[1, 4, 8], dims=dims), "a100")
    assert (out[0].min, out[0].max) == ((1, 3, 32, 320), (8, 3, 960, 320))
