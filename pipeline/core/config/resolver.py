"""The OmegaConf resolver that runs every config check while Hydra composes params.yaml.

conf/config.yaml sets ``config_check: ${pipeline_checked:}``. Both ways of composing resolve it before
params.yaml is written: ``dvc exp run -S ...`` (DVC's ``compose_and_dump`` calls ``OmegaConf.resolve``
after importing the Hydra plugins under ``hydra_plugins/``, whose ``triton_pipeline`` registers this
resolver) and ``python -m pipeline.params`` (the same DVC function). A bad value therefore fails at
composition with one message listing every problem, and params.yaml keeps its old content.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.core.config import derived, files, store
from pipeline.core.config.load import collect
from pipeline.core.config.problems import Problems

RESOLVER = "pipeline_checked"
ENGINE_RESOLVER = "pipeline_engine_precision"
INT8_RESOLVER = "pipeline_int8_in_fleet"
IN_FLEET_RESOLVER = "pipeline_in_fleet"  # ${pipeline_in_fleet:fp16}
CHECK_KEY = "config_check"
PASSED = "passed (pipeline/core/config)"
ORIGIN = "the config composed from conf/ (params.yaml not written)"

# The directory relative model paths are read from while composing: pipeline.params sets it to the project
# root of the conf/ it composes; `dvc exp run` leaves it unset, so the working directory (the repo root) counts.
_BASE: ContextVar[Path | None] = ContextVar("pipeline_config_base", default=None)


@contextmanager
def composing_in(project_root: Path) -> Iterator[None]:
    """Resolve relative model paths against ``project_root`` while composing inside this block."""
    token = _BASE.set(project_root)
    try:
        yield
    finally:
        _BASE.reset(token)


def check_composed(*, _root_: DictConfig) -> str:
    """Validate the whole composed config (the model source included); print composition notes; return :data:`PASSED`.

    Raises the package's one ConfigError on any problem (OmegaConf wraps it in an
    InterpolationResolutionError whose message carries ours; pipeline.params unwraps it).
    """
    p = Problems()
    raw: dict[str, Any] = {}
    unresolved: set[str] = set()
    for key in _root_:
        if key == CHECK_KEY:
            continue  # resolving it would call this resolver again
        try:
            node = _root_[key]
            raw[str(key)] = OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node
        except OmegaConfBaseException as e:
            unresolved.add(str(key))
            # `serving` is interpolated from targets[0]: when that fails, the fleet checks say why, and if they
            # do not, OmegaConf's own resolution of `serving` right after this resolver still fails loudly.
            if key not in ("serving", "engine_precision", "int8_in_fleet", "fp16_in_fleet"):
                p.add(str(key), None, f"cannot resolve: {str(e).splitlines()[0]}")
    base = _BASE.get()
    _dvc_params_present(raw, (base or Path.cwd()) / "dvc.yaml", unresolved, p)
    cfg, graph = collect(raw, ORIGIN, p, check_source=True, base=base)
    for note in files.notes(cfg, graph, base):
        print(f"note: {note}", file=sys.stderr)
    return PASSED


def _dvc_params_present(raw: dict[str, Any], dvc_yaml: Path, unresolved: set[str], p: Problems) -> None:
    """Every key a dvc.yaml stage lists under ``params`` must be in the composed config (``unresolved`` sections,
    derived ones that failed to resolve, are reported by the checks that explain why).

    Composition fills every schema key, so a key is missing only when dvc.yaml names one the schema does not have (a
    typo, or a field since renamed): DVC would refuse to run that stage, and would say so only when ``dvc repro``
    reaches it. A section (``bench``) counts as present when its key is.
    """
    if not dvc_yaml.is_file():
        return
    try:
        # libyaml's parser where PyYAML has it: the pure-Python one is a sixth of a composition's time on this file
        stages = (yaml.load(dvc_yaml.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError):
        return  # DVC reports a broken dvc.yaml itself
    for name, stage in stages.items():
        body = stage.get("do", stage) if isinstance(stage, dict) else {}
        for key in body.get("params") or []:
            parts = key.split(".") if isinstance(key, str) else []
            if not parts or "${" in key or parts[0] in unresolved:
                continue  # another params file, a foreach key, or a section the checks report
            node: Any = raw
            for part in parts:
                if not isinstance(node, dict) or part not in node:
                    p.add(
                        key,
                        None,
                        f"is missing, and dvc.yaml's stage '{name}' depends on it (DVC would refuse to "
                        f"run that stage): it is no key of the schema (pipeline/core/config/schema*.py, which fills every "
                        f"key of '{parts[0]}'); fix the name in dvc.yaml, or add the field to the schema",
                    )
                    break
                node = node[part]


def engine_precision(*, _root_: DictConfig) -> DictConfig:
    """``engine_precision: ${pipeline_engine_precision:}``: {fleet target: precision of the ONNX its engine stage reads}.

    dvc.yaml runs one engine stage per entry (``foreach``) and names the file from it, so each stage depends on the one
    ONNX file it reads (DVC has no nested interpolation, ``${target_specs.${item}.precision}``). Targets the fleet checks
    reject are left out here; the checks report them.
    """
    specs = _root_.get("target_specs") or {}
    out: dict[str, str] = {}
    for t in _root_.get("targets") or []:
        spec = specs.get(t) if isinstance(specs, DictConfig) else None
        if spec is not None:
            out[str(t)] = derived.engine_onnx_precision(str(spec.get("kind")), str(spec.get("precision")))
    return OmegaConf.create(out)  # a container: OmegaConf.resolve (DVC's compose) cannot put a plain dict in place


def int8_in_fleet(*, _root_: DictConfig) -> bool:
    """``int8_in_fleet: ${pipeline_int8_in_fleet:}``: whether some fleet target serves int8 or auto (which may choose it).

    The int8 stage lists this key, not target_specs: it runs its costly fallback search only when INT8 may be served,
    and a fleet change that leaves the answer as it was reruns nothing there.
    """
    specs = _root_.get("target_specs") or {}
    found = [specs.get(t) for t in _root_.get("targets") or []] if isinstance(specs, DictConfig) else []
    return derived.int8_in_fleet([str(s.get("precision")) for s in found if s is not None])


def in_fleet(precision: str, *, _root_: DictConfig) -> bool:
    """``fp16_in_fleet: ${pipeline_in_fleet:fp16}``: whether some fleet target serves ``precision``, or auto."""
    specs = _root_.get("target_specs") or {}
    found = [specs.get(t) for t in _root_.get("targets") or []] if isinstance(specs, DictConfig) else []
    return derived.in_fleet([str(s.get("precision")) for s in found if s is not None], precision)


def register() -> None:
    """Register the resolvers once per process (Hydra's plugin scan may execute the plugin module again), and the
    schema's defaults with Hydra (store.py), which composition fills params.yaml from."""
    store.register()
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, check_composed)
    if not OmegaConf.has_resolver(ENGINE_RESOLVER):
        OmegaConf.register_new_resolver(ENGINE_RESOLVER, engine_precision)
    if not OmegaConf.has_resolver(IN_FLEET_RESOLVER):
        OmegaConf.register_new_resolver(IN_FLEET_RESOLVER, in_fleet)
    if not OmegaConf.has_resolver(INT8_RESOLVER):
        OmegaConf.register_new_resolver(INT8_RESOLVER, int8_in_fleet)
