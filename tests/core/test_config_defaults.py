"""One source of truth: the schema holds every default, conf/ holds only choices and values that differ from it.

`triton-pipeline` falls back to the schema (PipelineConfig()) when there is no params.yaml, and every stage reads the
composed params.yaml: the two agree by construction, since composition fills every key from the schema (store.py).
These tests keep it so: conf/ repeats no default (a repeated default is a second place to forget when it changes), and
the composed params.yaml differs from the schema only in the choices conf/ makes.
"""

from __future__ import annotations

import dataclasses
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.core.config import PipelineConfig, load_config
from pipeline.core.config.schema import ModelConfig, TargetConfig, VariantConfig
from tests.helpers.project import ROOT

CONF = ROOT / "conf"

# What the default composition chooses on purpose: the model, the fleet, the throughput variant's batching, the keys
# derived from them, and the check stamp. Anything else that differs is drift.
CHOICES = {
    "model.name",
    "model.factory",
    "model.inputs",
    "model.outputs",
    "model.output_kinds",
    "model.data",
    "model.tokenizer",  # a text model's tokenizer file (null by default: no text endpoint)
    "target_specs",
    "engine_precision",
    "variants.throughput.max_batch_size",
    "variants.throughput.dynamic_batching",
    "variants.throughput.warmup.batch_sizes",
    "config_check",
}

# A choice file (one option of a group: a model, a target, a variant) may say these even where they equal the
# schema's default: they name the option and what it is, and are read as its identity, not as a tuned value.
IDENTITY = {"model": {"name", "source"}, "target": {"name", "kind", "precision"}, "variant": {"name"}}
# conf/config.yaml's own values: the fleet is the project's first choice, stated even though [cpu] is also the default.
ROOT_CHOICES = {"targets"}
# The group files whose content lands at a section of PipelineConfig, by group.
SECTIONS = {"export": "export", "precision": "precision", "int8": "int8", "parity": "parity", "choose": "choose", "bench": "bench", "release": "release"}


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted paths of the leaves where ``a`` and ``b`` differ (dataclasses compared field by field)."""
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return [p for f in dataclasses.fields(a) for p in differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}".lstrip("."))]
    return [] if a == b else [path]


def _plain(x: Any) -> Any:
    """A default as YAML holds it: Enums by value, dataclasses as mappings."""
    if isinstance(x, Enum):
        return x.value
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _plain(dataclasses.asdict(x))
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _section_class(typ: Any) -> type | None:
    """The dataclass behind a field's type (Optional[X] included), or None."""
    for t in (typ, *typing.get_args(typ)):
        if dataclasses.is_dataclass(t):
            return t  # type: ignore[return-value]
    return None


def repeated_defaults(node: dict[str, Any], default: Any, path: str = "") -> list[str]:
    """Dotted paths of the values in ``node`` (a conf/ file's mapping) equal to the schema's default at that place.

    ``default`` is the dataclass instance the file lands on; a section that is null by default (a variant's
    dynamic_batching) is compared with its class's defaults, which the file pulls in (store.py)."""
    hints = typing.get_type_hints(type(default))
    out = []
    for key, value in node.items():
        if key == "defaults":
            continue
        assert key in hints, f"{path}{key}: not a key of {type(default).__name__}"
        here, cls = getattr(default, key), _section_class(hints[key])
        if cls is not None and isinstance(value, dict):
            out += repeated_defaults(value, here if here is not None else cls(), f"{path}{key}.")
        elif _plain(here) == value:
            out.append(f"{path}{key}")
    return out


def _conf_files() -> list[tuple[str, Path]]:
    return [(p.parent.name, p) for p in sorted(CONF.glob("*/*.yaml"))]


@pytest.mark.parametrize(("group", "path"), _conf_files(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_conf_holds_only_choices_and_values_that_differ(group: str, path: Path) -> None:
    node = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if group in SECTIONS:
        default: Any = getattr(PipelineConfig(), SECTIONS[group])
    else:
        default = {"model": ModelConfig(), "target": TargetConfig(), "variant": VariantConfig(name=path.stem)}[group]
    repeated = sorted(set(repeated_defaults(node, default)) - IDENTITY.get(group, set()))
    assert not repeated, f"{path.relative_to(ROOT)} repeats the schema's defaults of {repeated}: remove them (the schema in pipeline/core/config is the one place a default lives)"


def test_the_root_config_holds_only_choices_and_derivations() -> None:
    node = yaml.safe_load((CONF / "config.yaml").read_text(encoding="utf-8"))
    repeated = sorted(set(repeated_defaults(node, PipelineConfig())) - ROOT_CHOICES)
    assert not repeated, f"conf/config.yaml repeats the schema's defaults of {repeated}"
    assert node["defaults"][0] == "schema", "the schema's defaults must come first, so every conf/ file composes over them"


def test_the_check_finds_a_repeated_default() -> None:
    assert repeated_defaults({"rounds": {"budget_s": 75.0, "c1": {"min": 3}}, "peers": []}, PipelineConfig().bench) == ["rounds.budget_s", "peers"]
    assert repeated_defaults({"name": "throughput", "dynamic_batching": {"max_queue_size": 0}}, VariantConfig(name="throughput")) == ["name", "dynamic_batching.max_queue_size"]


def test_the_composed_defaults_differ_from_the_schema_only_in_real_choices() -> None:
    drift = sorted(set(differences(load_config(ROOT / "params.yaml"), PipelineConfig())) - CHOICES)
    assert not drift, f"params.yaml and the schema's defaults differ on {drift}, which no choice explains: change defaults in pipeline/core/config, not in conf/"


def test_the_walk_finds_a_drifted_knob() -> None:
    cfg = PipelineConfig()
    cfg.bench.rounds.budget_s += 1
    assert differences(cfg, PipelineConfig()) == ["bench.rounds.budget_s"]
