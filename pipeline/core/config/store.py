"""The schema's defaults as Hydra configs: what composition fills every key of params.yaml from.

conf/config.yaml's defaults list starts with ``schema`` (every :class:`PipelineConfig` default), so the YAML under
conf/ holds only choices and values that differ. Where a config lands at a position the root has no default for, its
file starts with the schema of what it is: a target file with ``schema`` of its group (an entry of ``target_specs``),
the throughput variant's dynamic batching with ``dynamic_batching/schema`` and a text model's tokenizer with
``tokenizer/schema`` (blocks that are null by default).

The nodes are plain, untyped mappings (Enums as their values): a typo or a wrong type is then reported by this
package's own walk (load.py), with the key named and the closest valid value, not by OmegaConf's struct errors.
Registered by the Hydra plugin (hydra_plugins/triton_pipeline, which `dvc exp run` loads) and by pipeline.params.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from omegaconf import OmegaConf

from pipeline.core.config.schema import DynamicBatchingConfig, PipelineConfig, TargetConfig, TokenizerConfig

# (group, name) -> the dataclass whose defaults the node holds; group "" is the root of conf/.
NODES: dict[tuple[str, str], type] = {
    ("", "schema"): PipelineConfig,
    ("target", "schema"): TargetConfig,
    ("variant/dynamic_batching", "schema"): DynamicBatchingConfig,
    ("model/tokenizer", "schema"): TokenizerConfig,
}


def defaults_of(cls: type) -> dict[str, Any]:
    """Every default of dataclass ``cls`` (nested ones included) as plain YAML values (a copy the caller may change)."""
    return copy.deepcopy(_defaults(cls))


# A dataclass's defaults do not change within a process, and building them through OmegaConf is most of a
# composition's own time (every `python -m pipeline.params` and every composing test pays it).
@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    node = OmegaConf.to_container(OmegaConf.structured(cls), enum_to_str=True)
    assert isinstance(node, dict)
    return {str(k): v for k, v in node.items()}


def schema_keys(key: str = "") -> list[str]:
    """Every dotted key of the schema (a section's too), for a did-you-mean; under ``target_specs.<name>``, the keys of a
    target (named as in ``key``, the key looked up)."""
    parts = key.split(".")
    out = _dotted(defaults_of(PipelineConfig))
    if len(parts) > 1 and parts[0] == "target_specs":
        out += _dotted(defaults_of(TargetConfig), f"target_specs.{parts[1]}.")
    return out


def _dotted(node: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in node.items():
        out.append(prefix + k)
        if isinstance(v, dict):
            out += _dotted(v, f"{prefix}{k}.")
    return out


# What register() stored, per node: storing converts the defaults through OmegaConf, a tenth of a composition, and a
# process's schema does not change, so a node still held as stored is not stored again.
_STORED: dict[tuple[str, str], object] = {}


def register() -> None:
    """Store the schema's nodes in Hydra's ConfigStore, unless it still holds exactly what an earlier call stored."""
    from hydra.core.config_store import ConfigStore  # lazy: stages load params.yaml without Hydra

    store = ConfigStore.instance()
    for (group, name), cls in NODES.items():
        held = _held(store.repo, group, name)
        if held is not None and held is _STORED.get((group, name)):
            continue
        store.store(name=name, group=group or None, node=defaults_of(cls))
        _STORED[(group, name)] = _held(store.repo, group, name)


def _held(repo: dict[str, Any], group: str, name: str) -> object:
    """The ConfigNode Hydra's ConfigStore holds for ``group/name`` (None if none)."""
    cur: Any = repo
    for part in group.split("/") if group else []:
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur.get(f"{name}.yaml") if isinstance(cur, dict) else None
