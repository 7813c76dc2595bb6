"""Load and validate params: every problem collected, then one :class:`ConfigError` listing them all.

Order: the params must be a mapping; a walk over the raw values against the schema finds missing values,
unknown keys, wrong types and values outside an Enum (each replaced by its default so the walk goes on);
then the typed config gets the ranges its schema declares (knobs.py), the rules across fields (rules.py) and,
at composition, the model source checks (files.py).
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar, Union

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError
from omegaconf.nodes import BooleanNode, FloatNode, IntegerNode, StringNode, ValueNode

from pipeline.core.config import files
from pipeline.core.config.derived import IN_FLEET, derived_engine_precision, derived_in_fleet
from pipeline.core.config.enums import Precision
from pipeline.core.config.knobs import check_knobs
from pipeline.core.config.problems import Problems, did_you_mean
from pipeline.core.config.rules import check_rules
from pipeline.core.config.schema import PipelineConfig, ServingConfig
from pipeline.core.errors import ConfigError

# OmegaConf's own node types, so a value passes here exactly when it would pass the merge onto the schema.
_SCALAR_NODES: dict[type, Callable[..., ValueNode]] = {int: IntegerNode, float: FloatNode, bool: BooleanNode, str: StringNode}
_VARIANTS = ("latency", "throughput")
T = TypeVar("T")


def validate(raw: Any, origin: str = "params.yaml", *, check_source: bool = False) -> PipelineConfig:
    """Check ``raw`` (a mapping: a DictConfig or a dict) against the schema and every rule; return the typed :class:`PipelineConfig`.

    ``check_source`` (at composition) also checks the model source: the fields it needs and the files it names.
    Raises one :class:`ConfigError` (a ``ConfigProblems``) listing every problem found.
    """
    cfg, _graph = collect(raw, origin, Problems(), check_source=check_source)
    return cfg


def collect(raw: Any, origin: str, p: Problems, *, check_source: bool = False, base: Path | None = None) -> tuple[PipelineConfig, files.GraphIO | None]:
    """Like :func:`validate`, adding to ``p`` (which may hold problems already); raises if any at the end.

    ``base`` is the directory relative model paths are read from (default: the working directory).
    """
    if isinstance(raw, (DictConfig, ListConfig)):
        try:
            raw = OmegaConf.to_container(raw, resolve=True)
        except OmegaConfBaseException as e:
            raise ConfigError(
                f"cannot resolve an interpolation in {origin}", fix="fix or remove the ${...} value", details={"key": getattr(e, "full_key", "?"), "error": str(e).splitlines()[0]}
            ) from None
    if not isinstance(raw, dict):  # a top-level list or scalar
        raise ConfigError(
            f"{origin} holds a {type(raw).__name__}, not a mapping of config sections (model:, export:, ...)",
            fix="regenerate it with `python -m pipeline.params`",
        )
    raw = dict(raw)
    _catch_variant_choice(raw, p)
    # `serving` is derived from the fleet (conf/config.yaml): compared with its source below, never type-checked on
    # its own, so a bad target precision is reported once, at target_specs, not again at serving.
    serving = raw.pop("serving", None)
    if serving is not None and not (isinstance(serving, dict) and set(serving) <= {"target", "kind", "precision"}):
        p.add("serving", serving, "is derived from targets[0] and its target_specs entry: never set it")
        serving = None
    # The same for `engine_precision` (what each engine stage reads) and `<precision>_in_fleet`, all derived from the fleet.
    engine_precision = raw.pop("engine_precision", None)
    in_fleet = {f"{k}_in_fleet": raw.pop(f"{k}_in_fleet", None) for k in IN_FLEET}
    _walk(PipelineConfig, raw, "", p)
    cfg = _build(PipelineConfig, raw)
    graph = files.read_graph(cfg.model, base)
    outputs = list(cfg.model.outputs) or ([o.name for o in graph.outputs] if graph else None)
    check_knobs(cfg, p)
    check_rules(cfg, p, fixed_batch=files.fixed_batch(cfg, graph, base), serving=serving, outputs=outputs, engine_precision=engine_precision, in_fleet=in_fleet)
    if check_source:
        files.check_source(cfg, graph, p, base)
    p.raise_if_any(origin)
    first = cfg.target_specs[cfg.targets[0]]  # the checks passed: the fleet is non-empty and defined
    cfg.serving = ServingConfig(target=cfg.targets[0], kind=first.kind, precision=first.precision)
    cfg.engine_precision = {t: Precision(v) for t, v in derived_engine_precision(cfg).items()}
    cfg.int8_in_fleet = derived_in_fleet(cfg, "int8")
    cfg.fp16_in_fleet = derived_in_fleet(cfg, "fp16")
    return cfg, graph


def load_config(params_path: str | Path, origin: str | None = None) -> PipelineConfig:
    """Load and validate params.yaml; raise :class:`ConfigError` with the fix on any problem."""
    path = Path(params_path)
    if not path.is_file():
        raise ConfigError(f"params file not found: {path}", fix="run `python -m pipeline.params` to compose conf/ into params.yaml")
    try:
        top = yaml.safe_load(path.read_text(encoding="utf-8"))  # OmegaConf.load turns a bare scalar into a key
        raw = OmegaConf.load(path) if isinstance(top, dict) else top
    except Exception as e:  # noqa: BLE001 - yaml errors come in several types
        raise ConfigError(f"cannot parse {path}", fix="fix the YAML syntax", details={"error": e}) from None
    return validate(raw, origin=origin or str(path))


def from_plain(cls: type[T], data: dict[str, Any]) -> T:
    """A config section ``cls`` from its plain copy in a report (e.g. bench.json's ``settings``): known keys typed
    (nested sections and Enums), unknown ones dropped (a key since renamed), missing ones at their defaults. No checks:
    the values were checked when the config was loaded."""
    hints = typing.get_type_hints(cls)
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        typ, value = hints[f.name], data[f.name]
        if dataclasses.is_dataclass(typ) and isinstance(value, dict):
            value = from_plain(typ, value)  # type: ignore[arg-type]
        elif isinstance(typ, type) and issubclass(typ, Enum):
            value = typ(value)
        kw[f.name] = value
    return cls(**kw)


def _catch_variant_choice(raw: dict[str, Any], p: Problems) -> None:
    """`variant=throughput` puts one variant file at the group's own key `variant` (conf/config.yaml declares the group
    with no choice for this): say where the real choice is, and drop what it added. The variants live at `variants`."""
    node = raw.pop("variant", None)
    if node is None:
        return
    chosen = node.get("name", "?") if isinstance(node, dict) else node
    p.add(
        "variant",
        chosen,
        "the `variant` group is not a choice: both variants (latency, throughput) are always built; "
        f"the served default is repository.default_variant (e.g. repository.default_variant={chosen}), and a variant's "
        f"values are set with variants.{chosen if chosen in _VARIANTS else 'latency'}.<key>=...",
    )


def _walk(cls: type, raw: dict[str, Any], prefix: str, p: Problems) -> None:
    """Check every key of ``raw`` against dataclass ``cls``; a bad value is reported and dropped (default used)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in list(raw):
        full = f"{prefix}{key}"
        if key not in hints:
            p.add(full, raw[key], "unknown key" + did_you_mean(full, [prefix + n for n in names]))
            del raw[key]
        elif not _value_ok(hints[key], raw[key], full, p):
            p.skip.add(full)
            del raw[key]


def _value_ok(typ: Any, value: Any, key: str, p: Problems) -> bool:
    """Whether ``value`` fits type ``typ``; records the problem if not. Recurses into dataclasses and containers."""
    if isinstance(value, str) and value == "???":
        return p.add(key, value, f"has no value: set it, e.g. `python -m pipeline.params ... {key}=<value>` or `dvc exp run -S {key}=<value>`")
    if typing.get_origin(typ) in (Union, types.UnionType) and type(None) in typing.get_args(typ):
        if value is None:
            return True
        typ = next(a for a in typing.get_args(typ) if a is not type(None))  # Optional[X]: X
    if typ is Any:
        return True
    if value is None:
        return p.add(key, value, "must not be null")
    if dataclasses.is_dataclass(typ) or typing.get_origin(typ) in (dict, list):
        return _container_ok(typ, value, key, p)
    if isinstance(typ, type) and issubclass(typ, Enum):
        return _enum_ok(typ, value, key, p)
    return _scalar_ok(typ, value, key, p)


def _container_ok(typ: Any, value: Any, key: str, p: Problems) -> bool:
    """A dataclass or a dict (each checked, a bad entry dropped), or a list (every element checked)."""
    if typing.get_origin(typ) is list:
        if not isinstance(value, list):
            return p.add(key, value, "must be a list")
        return all([_value_ok(typing.get_args(typ)[0], v, f"{key}[{i}]", p) for i, v in enumerate(value)])  # noqa: C419 - report every element
    if not isinstance(value, dict):
        return p.add(key, value, "must be a mapping")
    if dataclasses.is_dataclass(typ):
        _walk(typ, value, key + ".", p)  # type: ignore[arg-type]
        return True
    for k in list(value):
        if not _value_ok(typing.get_args(typ)[1], value[k], f"{key}.{k}", p):
            del value[k]
    return True


def _enum_ok(typ: type[Enum], value: Any, key: str, p: Problems) -> bool:
    choices = [m.value for m in typ]
    if (isinstance(value, typ) or value in choices) and not isinstance(value, bool):
        return True
    return p.add(key, value, f"not one of [{', '.join(map(str, choices))}]" + did_you_mean(str(value), map(str, choices)))


def _scalar_ok(typ: Any, value: Any, key: str, p: Problems) -> bool:
    """An int, float, bool or str as OmegaConf would convert it (its own node types decide, as at merge)."""
    node_type = _SCALAR_NODES.get(typ)
    if node_type is None:
        return True  # a type OmegaConf itself checks at merge
    try:
        node_type(value=value)
    except ValidationError as e:
        said = str(e).splitlines()[0].replace("$VALUE_TYPE", type(value).__name__).replace("$VALUE", str(value))  # OmegaConf's unfilled template
        return p.add(key, value, f"must be {'an' if typ is int else 'a'} {typ.__name__}: {said}")
    return True


def _build(typ: Any, value: Any) -> Any:
    """The typed value of ``value`` (which :func:`_walk` has checked) for type ``typ``: dataclasses, Enums and
    OmegaConf's own scalar conversions (an int where a float is declared becomes a float, as at a merge onto the
    schema), keys left out at their dataclass defaults.

    Built directly rather than by ``OmegaConf.merge`` onto the structured schema: that merge was five sixths of a
    validation's time, and every composition and every stage pays a validation. tests/core/test_config_load.py
    checks that both give the same config.
    """
    if value is None or typ is Any:
        return copy.deepcopy(value)
    if typing.get_origin(typ) in (Union, types.UnionType):
        typ = next(a for a in typing.get_args(typ) if a is not type(None))  # Optional[X] holding a value: X
    if dataclasses.is_dataclass(typ):
        hints = typing.get_type_hints(typ)
        return typ(**{k: _build(hints[k], v) for k, v in value.items()})  # type: ignore[operator]
    origin = typing.get_origin(typ)
    if origin is list:
        (item,) = typing.get_args(typ)
        return [_build(item, v) for v in value]
    if origin is dict:
        item = typing.get_args(typ)[1]
        return {str(k): _build(item, v) for k, v in value.items()}
    if isinstance(typ, type) and issubclass(typ, Enum):
        return typ(value)
    node_type = _SCALAR_NODES.get(typ)
    return value if node_type is None else node_type().validate_and_convert(value)
