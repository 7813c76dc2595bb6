"""An environment's live version is the ``version_policy`` in its config.pbtxt, and nothing else.

Why one file: Triton reads ``version_policy { specific { versions: [N] } }`` to decide which
numbered directory it serves, so that file already *is* the pointer. Keeping a second
pointer (a symlink or a LIVE file) would give two sources of truth that can disagree after
a crash between two writes. Flipping an environment is therefore one atomic replace of
``envs/<env>/<model>/config.pbtxt`` (see :meth:`pipeline.release.store.fs.StoreFS.write_atomic`),
and every tool here reads the live version back from that same file.

The environment serves one config (the release's default variant unless ``--variant``
chooses another); it carries no ``configs/`` directory, because Triton's
``--model-config-name`` would load a variant file that has no version_policy of ours.

Its ``model_warmup`` reads the live version's own data: one ``<model>/`` holds every version
promoted there, so each release's warmup files are installed under ``<model>/warmup/<N>/``
(:mod:`pipeline.release.store.env_copy`) and the config's ``input_data_file`` entries name
``<N>/<file>`` (:func:`for_version`). A live switch's handover config carries no warmup
(:func:`handover` says why).
"""

from __future__ import annotations

import re

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.repository import config as triton_config
from pipeline.core.errors import ReleaseError

HEADER = (
    "# Environment '{env}' of the release store: Triton serves version {version} of '{model}'.\n"
    "# This file is the environment's pointer: `release promote` / `release rollback` replace it\n"
    "# atomically. version_policy names the live version; the other numbered directories are\n"
    "# kept for rollback. Rendered from release {version}'s {variant} config; do not edit by hand.\n"
)


def parse_config(text: str, where: str, fix: str = "restore it with `release promote` or `release rollback`") -> mc.ModelConfig:
    """Parse a config.pbtxt with Triton's own schema; ``fix`` says how to repair it where it was read."""
    return triton_config.parse_text(text, where, ReleaseError, fix)


def live_versions(cfg: mc.ModelConfig) -> list[int]:
    """Versions named by a ``specific`` version policy ([] if the policy is not ``specific``)."""
    if cfg.HasField("version_policy") and cfg.version_policy.WhichOneof("policy_choice") == "specific":
        return sorted(int(v) for v in cfg.version_policy.specific.versions)
    return []


def for_version(cfg: mc.ModelConfig, version: int) -> mc.ModelConfig:
    """A copy of ``cfg`` whose ``model_warmup`` reads ``<model>/warmup/<version>/``, where an environment keeps that release's rows.

    Idempotent (a name already under a version is moved to ``version``); zero_data / random_data inputs and
    configs without warmup are unchanged.
    """
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    for sample in out.model_warmup:
        for inp in sample.inputs.values():
            if inp.WhichOneof("input_data_type") == "input_data_file":
                inp.input_data_file = f"{version}/{_VERSIONED.sub('', inp.input_data_file)}"
    return out


_VERSIONED = re.compile(r"^\d+/")  # release files are flat (repository.warmup.file_names): a '/' is our version prefix


def with_policy(cfg: mc.ModelConfig, model: str, versions: list[int]) -> mc.ModelConfig:
    """A copy of ``cfg`` named ``model`` that serves exactly ``versions``."""
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    out.name = model
    out.ClearField("version_policy")
    out.version_policy.specific.versions.extend(sorted(set(versions)))
    return out


def handover(cfg: mc.ModelConfig, model: str, old: int | None, new: int) -> mc.ModelConfig:
    """The config a live switch loads first: ``cfg`` (the new release's) serving ``[old, new]``, without model_warmup.

    Why without: Triton reloads every version of the policy with this one config, so the old version would warm
    up with the new release's rows, and a row the old model cannot take (a token id past its vocabulary) fails the
    whole load, which refuses the switch although the new version is fine. The new version serves cold until the
    reload after the flip (the pointer's config, its own rows) replaces it with a warmed instance. With nothing
    serving, or the same version again (a repair), only rows of the version itself are run, so warmup stays.
    """
    out = with_policy(cfg, model, [v for v in (old, new) if v is not None])
    if old is not None and old != new:
        out.ClearField("model_warmup")
    return out


def render(cfg: mc.ModelConfig, env: str, model: str, version: int, variant: str, keep: int | None = None) -> bytes:
    """The bytes of an environment's config.pbtxt pointing at ``version``; with ``keep``, serving ``keep`` beside it
    (the model of a set while its text endpoint switches: :mod:`pipeline.release.promote_set`)."""
    body = text_format.MessageToString(handover(cfg, model, keep, version) if keep is not None else with_policy(cfg, model, [version]))
    head = HEADER.format(env=env, version=version, model=model, variant=variant)
    if keep is not None:
        head += f"# Version {keep} is served beside it until the models of its set have switched.\n"
    return (head + body).encode("utf-8")


# A text endpoint's parameters (repository/text_model.py): the model it calls, and in an environment, which version.
CALLS = "tensor_model"
PIN = "tensor_version"


def calls(cfg: mc.ModelConfig) -> str | None:
    """The model a text endpoint's config calls (None for any other model)."""
    return (cfg.parameters[CALLS].string_value or None) if CALLS in cfg.parameters else None


def pin_of(cfg: mc.ModelConfig) -> int | None:
    """The version of its tensor model a text endpoint's config calls (None: unpinned, or not a text endpoint)."""
    value = cfg.parameters[PIN].string_value if PIN in cfg.parameters else ""
    return int(value) if value.isdigit() else None


def pinned(cfg: mc.ModelConfig, version: int | None) -> mc.ModelConfig:
    """``cfg`` calling ``version`` of its tensor model: a text endpoint in an environment answers only with the
    version it was switched with. Other models' configs, and ``version`` None, are returned unchanged."""
    if version is None or calls(cfg) is None:
        return cfg
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    out.parameters[PIN].string_value = str(version)
    return out


def to_json(cfg: mc.ModelConfig) -> str:
    """The config as JSON for Triton's repository API (``load`` with a config override)."""
    return json_format.MessageToJson(cfg, preserving_proto_field_name=True)
