"""Precision settings checked at composition: auto only where it can be timed, INT8 from real samples in a form
TensorRT reads, the derived engine_precision and int8_in_fleet, the int8 and choose sections' ranges (the split included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.core.config import load_config
from pipeline.core.config.problems import ConfigProblems
from pipeline.params import compose
from tests.conftest import TINY_MLP

DATA = "+model.data={_target_: tests.helpers.tiny_models.mlp_samples}"
TRT_INT8 = ["int8.activation_type=int8", "int8.activation_symmetric=true"]  # what an INT8 engine needs (uint8 is the CPU default)


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigProblems) as e:
        compose([*TINY_MLP, *overrides])
    return [p.line() for p in e.value.problems]


def test_engine_precision_is_derived_per_fleet_target() -> None:
    params = yaml.safe_load(compose([*TINY_MLP, DATA, "targets=[cpu,a100,h100]", "target_specs.h100.precision=int8", *TRT_INT8]))
    # dvc.yaml runs engine@<target> per entry and reads model.<precision>.onnx; a cpu target builds nothing, reads FP32.
    assert params["engine_precision"] == {"cpu": "fp32", "a100": "fp16", "h100": "int8"}


@pytest.mark.parametrize(
    ("overrides", "in_fleet"),
    [
        ([], False),  # the default fleet [cpu] serves fp32
        (["targets=[cpu,a100,h100]"], False),  # GPU targets serve fp16 by default
        (["target_specs.cpu.precision=auto"], True),  # auto may choose int8
        ([DATA, "target_specs.cpu.precision=int8"], True),
        ([DATA, "targets=[cpu,h100]", "target_specs.h100.precision=int8", *TRT_INT8], True),  # an engine built from the INT8 file
        ([DATA, "target_specs.h100.precision=int8", *TRT_INT8], False),  # defined, but not in the fleet
    ],
)
def test_int8_in_fleet_is_derived_from_the_fleet(overrides: list[str], in_fleet: bool) -> None:
    """The int8 stage's one fleet key: it runs the fallback search only when a fleet target may serve INT8."""
    assert yaml.safe_load(compose([*TINY_MLP, *overrides]))["int8_in_fleet"] is in_fleet


def test_int8_in_fleet_set_by_hand_is_refused(tmp_path: Path) -> None:
    assert any(ln.lower().startswith("int8_in_fleet=true") and "never set it" in ln for ln in problems("int8_in_fleet=true"))
    (tmp_path / "params.yaml").write_text(compose(TINY_MLP).replace("int8_in_fleet: false", "int8_in_fleet: true"))
    with pytest.raises(ConfigProblems, match="int8_in_fleet.*never set it"):
        load_config(tmp_path / "params.yaml")


def test_engine_precision_set_by_hand_is_refused(tmp_path: Path) -> None:
    text = compose(TINY_MLP).replace("engine_precision:\n  cpu: fp32", "engine_precision:\n  cpu: int8")
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ConfigProblems, match="engine_precision.*never set it"):
        load_config(tmp_path / "params.yaml")


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (["targets=[cpu,a100]", "target_specs.a100.precision=auto"], "target_specs.a100.precision", "says nothing about a TensorRT engine"),
        (["target_specs.cpu.precision=int8"], "target_specs.cpu.precision", "model.data is null"),
        ([DATA, "targets=[cpu,a100]", "target_specs.a100.precision=int8"], "int8.activation_type", "symmetric int8"),
        ([DATA, "targets=[cpu,a100]", "target_specs.a100.precision=int8", *TRT_INT8, "int8.mode=dynamic"], "int8.mode", "needs Q/DQ nodes"),
        (["choose.candidates=[fp32,auto]"], "choose.candidates", "lists auto"),
        (["choose.min_rounds=1"], "choose.min_rounds", ">= 2"),
        (["int8.calibration.max_samples=4"], "int8.calibration.max_samples", ">= 8"),
        (["int8.calibration.holdout=0"], "int8.calibration.holdout", "must be in (0, 1)"),
        (["int8.calibration.holdout=1"], "int8.calibration.holdout", "must be in (0, 1)"),
        (["int8.calibration.min_holdout=0"], "int8.calibration.min_holdout", ">= 1"),
        (["int8.op_types=[]"], "int8.op_types", "at least one op type"),
        (["parity.int8.quality.rank_agreement=1.5"], "parity.int8.quality.rank_agreement", "[-1, 1]"),
        (["int8.calibration.method=kl"], "int8.calibration.method", "minmax, entropy, percentile"),
        (["int8.fallback.validation=1"], "int8.fallback.validation", "must be in (0, 1)"),
        (["int8.smoothing=0"], "int8.smoothing", "must be in (0, 1]"),
        (["int8.smoothing=1.5"], "int8.smoothing", "must be in (0, 1]"),
        (["int8.fallback.validation=0.2"], "int8.fallback.validation", "leaves, with the fewest rows allowed, 7 search and 1 validation rows"),
        (["int8.calibration.min_samples=5"], "int8.fallback.validation", "3 search and 2 validation rows; each part needs at least 3"),
    ],
)
def test_bad_precision_settings_fail_at_composition_naming_the_key(overrides: list[str], key: str, says: str) -> None:
    lines = problems(*overrides)
    assert any(ln.startswith(f"{key}=") and says in ln for ln in lines), lines


def test_the_fallback_split_is_checked_only_when_the_fallback_runs() -> None:
    for overrides in (["int8.fallback.validation=0.2", "int8.fallback.enabled=false"], ["int8.fallback.validation=0.25", "int8.calibration.min_samples=12"]):
        assert yaml.safe_load(compose([*TINY_MLP, *overrides]))["int8"]["fallback"]["validation"] in (0.2, 0.25)


def test_auto_and_int8_on_a_cpu_target_compose() -> None:
    assert yaml.safe_load(compose([*TINY_MLP, "target_specs.cpu.precision=auto"]))["serving"]["precision"] == "auto"
    assert yaml.safe_load(compose([*TINY_MLP, DATA, "target_specs.cpu.precision=int8"]))["serving"]["precision"] == "int8"
