"""conf/ and the schema agree on every default: the composed params.yaml differs from the dataclasses only in real choices.

`triton-pipeline` falls back to the schema (PipelineConfig()) when there is no params.yaml, and every stage reads the
composed params.yaml: a knob whose YAML default drifted from its dataclass default would behave differently by path.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pipeline.core.config import PipelineConfig, load_config

ROOT = Path(__file__).resolve().parents[2]

# What the default composition chooses on purpose: the model, the fleet, the throughput variant's batching, the keys
# derived from them, and the check stamp. Anything else that differs is drift.
CHOICES = {
    "model.name",
    "model.factory",
    "model.inputs",
    "model.outputs",
    "model.output_kinds",
    "model.data",
    "target_specs",
    "engine_precision",
    "variants.throughput.max_batch_size",
    "variants.throughput.dynamic_batching",
    "variants.throughput.warmup.batch_sizes",
    "config_check",
}


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted paths of the leaves where ``a`` and ``b`` differ (dataclasses compared field by field)."""
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return [p for f in dataclasses.fields(a) for p in differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}".lstrip("."))]
    return [] if a == b else [path]


def test_the_composed_defaults_differ_from_the_schema_only_in_real_choices() -> None:
    drift = sorted(set(differences(load_config(ROOT / "params.yaml"), PipelineConfig())) - CHOICES)
    assert not drift, f"conf/ and the dataclass defaults disagree on {drift}: set the same default in pipeline/core/config and conf/, then run `python -m pipeline.params`"


def test_the_walk_finds_a_drifted_knob() -> None:
    cfg = PipelineConfig()
    cfg.bench.rounds_budget_s += 1
    assert differences(cfg, PipelineConfig()) == ["bench.rounds_budget_s"]
