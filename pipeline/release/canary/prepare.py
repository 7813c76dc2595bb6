"""Step 1 of ``release canary``: every refusal before anything loads, and what the canary then loads and replays.

The candidate must be a release, not live, take and return what the live version does (:func:`signature`),
pass its checksums, signature and GTO check, carry samples to replay (or get ``--inputs``); every server must
be reachable, in explicit model-control mode, serving the live version, with no copies of an earlier canary.
The command line's overrides of ``release.canary`` are checked the way composition checks them (:func:`checked`).
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.config import ParityConfig, ToleranceConfig
from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.problems import ConfigProblems, Problems
from pipeline.core.config.rules import check_canary
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.errors import ConfigError, ReleaseError
from pipeline.core.samples import load_feed_file, read_sentences, request_rows
from pipeline.parity import polygraphy as pg
from pipeline.records.release import ReleaseManifest
from pipeline.release.canary import traffic as ct
from pipeline.release.canary.guard import loaded_copies
from pipeline.release.evidence import reports, tags
from pipeline.release.promote import SwitchOptions
from pipeline.release.store import env_copy, pointer
from pipeline.release.store.history import variant_of
from pipeline.release.store.store import EnvState, ReleaseStore
from pipeline.release.triton_control import TritonReloader


@dataclass(frozen=True)
class Candidate:
    """What a canary judges: release ``version`` of ``model`` (None: the store's only model) against the live version of ``env``."""

    env: str
    version: int
    model: str | None = None
    variant: str | None = None  # the candidate's config variant (None: the one the live version was promoted with)


def checked(cfg: CanaryConfig, **overrides: Any) -> CanaryConfig:
    """``release.canary`` with the command line's overrides, checked by the rules composition applies.

    Raises:
        ConfigProblems: a bound or a traffic setting that cannot be met, each with the closest valid value.
    """
    p = Problems()
    if overrides.get("share") is not None and overrides.get("traffic") is None:
        overrides["traffic"] = CanaryTraffic.real  # a share only means something for a share of real traffic
    traffic = overrides.get("traffic")
    if traffic is not None and p.choice("release.canary.traffic", str(traffic), CanaryTraffic.choices()):
        overrides["traffic"] = CanaryTraffic(str(traffic))
    out = replace(cfg, **{k: v for k, v in overrides.items() if v is not None and not (k == "traffic" and p)})
    check_canary(out, p)
    if p:
        raise ConfigProblems(p.items, "the canary settings (release.canary in params.yaml, overridden by --traffic/--share/--duration)")
    return out


@dataclass(frozen=True)
class Signature:
    """What a client sends and gets back: batching, and each input's and output's name, type and shape."""

    batched: bool
    inputs: list[str]
    outputs: list[str]


def signature(cfg: mc.ModelConfig) -> Signature:
    """The signature clients of ``cfg`` rely on."""

    def io(ts: Any) -> list[str]:
        return sorted(f"{t.name}: {mc.DataType.Name(t.data_type).removeprefix('TYPE_')}{list(t.dims)}" for t in ts)

    return Signature(cfg.max_batch_size > 0, io(cfg.input), io(cfg.output))


def _check_signatures(live: mc.ModelConfig, cand: mc.ModelConfig, lv: int, cv: int) -> None:
    a, b = signature(live), signature(cand)
    if a != b:
        diff: dict[str, object] = {
            f.name: f"live v{lv} {getattr(a, f.name)} vs candidate v{cv} {getattr(b, f.name)}" for f in fields(a) if getattr(a, f.name) != getattr(b, f.name)
        }
        raise ReleaseError(
            f"version {cv} does not take and return what live version {lv} does, so clients of the live version would break",
            fix="a canary compares drop-in replacements; ship a changed signature as a new model name",
            details=diff,
        )


def text_input(cfg: mc.ModelConfig) -> str | None:
    """The one TYPE_STRING input of a text endpoint's config (``<model>_text``), else None."""
    return cfg.input[0].name if len(cfg.input) == 1 and cfg.input[0].data_type == mc.TYPE_STRING else None


def _text_rows(model: str, name: str, batched: bool, sentences: Path | None) -> tuple[list[ct.Feed], list[str]]:
    """Batch-1 requests of a text endpoint: one sentence each, from ``sentences`` (one per line, ``#`` comments)."""
    fix = "pass --inputs <a .txt file, one sentence per line> (the bench's are in pipeline/data/sentences.txt)"
    if sentences is None or sentences.suffix != ".txt" or not sentences.is_file():
        what = "no --inputs was given" if sentences is None else f"--inputs {sentences} is not a .txt file of sentences"
        raise ReleaseError(f"'{model}' takes text, and {what}: a text endpoint's canary sends sentences", fix=fix)
    texts = read_sentences(sentences)
    if not texts:
        raise ReleaseError(f"--inputs {sentences} holds no sentences", fix=fix)
    shape = (1, 1) if batched else (1,)
    return [{name: np.array([t.encode("utf-8")], dtype=object).reshape(shape)} for t in texts], [str(sentences)]


def _rows(store: ReleaseStore, model: str, versions: list[int], cfg: mc.ModelConfig, extra: Path | None) -> tuple[list[ct.Feed], list[str]]:
    """Batch-1 request rows: the releases' own samples (candidate's, else live's) plus ``extra``, in the config's dtypes;
    for a text endpoint, the sentences of ``extra``."""
    from tritonclient.utils import triton_to_np_dtype

    text = text_input(cfg)
    if text is not None:
        return _text_rows(model, text, cfg.max_batch_size > 0, extra)
    feeds, sources = [], []
    for v in versions:
        rel = f"{store.release_rel(model, v)}/files/{reports.SAMPLES_FILE}"
        if store.fs.exists(rel):
            with tempfile.TemporaryDirectory() as tmp, pg.quiet():
                (Path(tmp) / "inputs.json").write_bytes(store.fs.read_bytes(rel))
                feeds += load_feed_file(Path(tmp) / "inputs.json")
            sources.append(f"release {v}'s samples")
            break
    if extra is not None:
        if not extra.is_file():
            raise ReleaseError(f"--inputs file not found: {extra}", fix="give a Polygraphy inputs JSON (a list of feed dicts) or an .npz")
        try:
            with pg.quiet():
                feeds += load_feed_file(extra)
        except ConfigError as e:  # its message names model.data.path, the key the stages read it from
            raise ReleaseError(
                f"cannot read --inputs {extra}", fix="give a Polygraphy inputs JSON (a list of feed dicts) or an .npz", details={"error": e.details.get("error") or e.what}
            ) from None
        sources.append(str(extra))
    if not feeds:
        raise ReleaseError(
            f"releases {versions} of '{model}' carry no samples to replay, and no --inputs was given",
            fix="pass --inputs <Polygraphy inputs JSON or .npz>, or build releases with `release build` after `dvc repro parity`",
        )
    want = {i.name: np.dtype(triton_to_np_dtype(mc.DataType.Name(i.data_type).removeprefix("TYPE_"))) for i in cfg.input}
    missing = sorted({n for f in feeds for n in want if n not in f})
    if missing:
        raise ReleaseError(
            f"the samples lack inputs {missing} of the served config", fix="give --inputs with every input", details={"inputs": sorted(want), "samples from": ", ".join(sources)}
        )
    rows = request_rows([{n: np.asarray(f[n]).astype(want[n]) for n in want} for f in feeds], cfg.max_batch_size > 0)
    return rows, sources


def _model_files(store: ReleaseStore, model: str, version: int, m: ReleaseManifest) -> dict[str, bytes]:
    """What Triton needs of a release's model directory (its version directory, and the warmup rows its config
    names, at ``warmup/<N>/`` as in an environment), read once and checked byte for byte against its manifest;
    the configs and samples are not sent."""
    rel = f"{store.release_rel(model, version)}/files"
    out = {}
    for f in store.fs.walk_files(rel):
        if f == "config.pbtxt" or f.startswith(("configs/", "samples/")):
            continue
        data = store.fs.read_bytes(f"{rel}/{f}")
        listed = m.files.get(f)
        if listed is None or hashlib.sha256(data).hexdigest() != listed.sha256:
            raise ReleaseError(f"{f} of release {version} changed while it was read", fix="do not promote it; check the store")
        out[env_copy.env_file(f, version)] = data
    return out


def _tolerance(m: ReleaseManifest, parity: ParityConfig) -> tuple[str, ToleranceConfig]:
    """The parity tolerance of the artifact the release serves (fp32, fp16, trt; fp32 when the manifest does not say)."""
    kinds = [s.artifact.split("@")[0] for s in (m.parity.served if m.parity else {}).values()]
    kind = next((k for k in kinds if hasattr(parity, k)), "fp32")
    return kind, getattr(parity, kind)


def _check_servers(urls: list[str], model: str, live: int, timeout_s: float, calls: tuple[str, int | None] | None = None) -> None:
    """Every server reachable, in explicit mode, serving the live version, without a candidate left over; and, for a
    text endpoint, serving the live version of the tensor model its copies call (``calls``: its name and version)."""
    for u in urls:
        with contextlib.closing(TritonReloader(u, model, timeout_s)) as r:
            r.check()
            r.check_explicit()
            if not r.ready(live):
                raise ReleaseError(
                    f"Triton at {r.url} does not serve version {live} of '{model}', the live version of this environment",
                    fix="start it on the environment (`release list` prints the command) and --load-model the model",
                )
            if calls is not None and (calls[1] is None or not r.ready(calls[1], calls[0])):
                raise ReleaseError(
                    f"Triton at {r.url} does not serve the tensor model '{calls[0]}' the text endpoint calls"
                    + (f" (version {calls[1]}, live in this environment)" if calls[1] is not None else " (nothing of it is live in this environment)"),
                    fix=f"promote '{calls[0]}' to the environment and --load-model it; the canary's copies call it as production does",
                )
            left = loaded_copies(r, model)
            if left:
                raise ReleaseError(f"copies of an earlier canary ({', '.join(left)}) are still loaded on {r.url}", fix="run `release canary --env <env> --abort` first")


def _calls(store: ReleaseStore, env: str, cfg: mc.ModelConfig) -> tuple[str, int | None] | None:
    """For a text endpoint: the tensor model its copies call (as the served one does) and its live version in ``env``."""
    tensor = pointer.calls(cfg)
    if text_input(cfg) is None or tensor is None:
        return None
    return tensor, store.env_state(env, tensor).live


@dataclass(frozen=True)
class Prepared:
    """A canary that passed every check of step 1, with what it loads and replays."""

    model: str
    live: int
    variant: str | None  # as the switch is asked for it (None: the release's config.pbtxt)
    variant_name: str  # as the release names it
    state: EnvState  # read under the lock
    configs: dict[int, mc.ModelConfig]  # version -> the config its copy is loaded with
    files: dict[int, dict[str, bytes]]  # version -> its model directory's files, checked against its manifest
    rows: list[ct.Feed]
    sources: list[str]  # where the rows come from
    tolerance: tuple[str, ToleranceConfig]  # the parity kind and tolerance the outputs are compared with
    own: OwnModel | None = None  # a text candidate built with another version of the model the environment serves


@dataclass(frozen=True)
class OwnModel:
    """The version of the model a text candidate was built with (the same commit), when the environment serves another:
    the candidate's copy calls a copy of it, and a pass switches both as one set."""

    name: str
    version: int
    live: int
    variant: str | None  # the variant the model is served with
    config: mc.ModelConfig
    files: dict[str, bytes]

    def called_by(self, cfg: mc.ModelConfig, copy: str) -> mc.ModelConfig:
        """``cfg`` (the candidate's) calling ``copy``, the copy of this version."""
        out = pointer.pinned(cfg, self.version)
        out.parameters[pointer.CALLS].string_value = copy
        return out


def prepare(store: ReleaseStore, cand: Candidate, opts: SwitchOptions, cfg: CanaryConfig, parity: ParityConfig, inputs: Path | None) -> Prepared:
    """Step 1 under the lock: every refusal before anything loads (``cand.model`` resolved).

    Raises:
        ReleaseError: nothing live, the candidate live already, another signature, its files or signature
        fail, no GTO tag (with tagging on), no samples, or a server not ready for a canary.
    """
    env, model, version = cand.env, str(cand.model), cand.version
    state = store.env_state(env, model)
    store.check_pointer(state)
    if state.live is None:
        raise ReleaseError(f"nothing is live in '{env}', so there is nothing to compare version {version} with", fix=f"promote first: `release promote --to {env}`")
    if state.live == version:
        raise ReleaseError(f"version {version} is already live in '{env}'", fix="canary another version")
    live = state.live
    variant = cand.variant or variant_of(state.history, live)
    # The pointer's config, its warmup reading the live release's rows (a pointer written before it did, too).
    live_cfg = pointer.for_version(pointer.parse_config(store.fs.read_text(f"{store.model_rel(env, model)}/config.pbtxt"), "the pointer"), live)
    cand_cfg, variant_name = store.release_config(model, version, variant)
    _check_signatures(live_cfg, cand_cfg, live, version)
    m = store.verify_release(model, version)
    store.check_signature(model, version, opts.public_key)
    tags.check_assignable(opts.git_repo, model, version, m.commit)
    rows, sources = _rows(store, model, [version, live], cand_cfg, inputs)
    files = {live: _model_files(store, model, live, store.verify_release(model, live)), version: _model_files(store, model, version, m)}
    calls = _calls(store, env, cand_cfg)
    _check_servers(list(opts.reload), model, live, cfg.load_timeout_s, calls)
    # Both copies of a text endpoint call the tensor version the environment serves, as the candidate will once promoted,
    # unless the candidate was built with another version of it: then its copy calls a copy of that one (run.py).
    pin = calls[1] if calls else None
    configs = {live: pointer.pinned(live_cfg, pin), version: pointer.pinned(cand_cfg, pin)}
    own = _own_model(store, env, model, version, calls)
    return Prepared(model, live, variant, variant_name, state, configs, files, rows, sources, _tolerance(m, parity), own)


def _own_model(store: ReleaseStore, env: str, model: str, version: int, calls: tuple[str, int | None] | None) -> OwnModel | None:
    """The model release the text candidate was built with, if the environment serves another version of that model."""
    if calls is None or calls[1] is None:
        return None
    tensor, live = calls[0], calls[1]
    try:
        built = store.built_with(tensor, model, version)
    except ReleaseError:
        return None  # no release of the model from the candidate's commit: it calls the one served
    if built == live:
        return None
    variant = variant_of(store.env_state(env, tensor).history, live)
    cfg, _ = store.release_config(tensor, built, variant)
    return OwnModel(tensor, built, live, variant, cfg, _model_files(store, tensor, built, store.verify_release(tensor, built)))
