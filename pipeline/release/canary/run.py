"""``release canary``: serve a candidate beside the live version, judge it, then promote it or unload it.

Order, all under the environment's lock (so no promote or rollback runs meanwhile):

1. refuse before anything loads: the candidate is not a release, is already live, nothing is live, its
   inputs/outputs differ from the live version's, its files or signature fail, no samples to replay,
   a server is unreachable, not in explicit model-control mode or not serving the live version, or
   copies of an earlier canary are still loaded there;
2. write the canary's record (``running``) and start its guard (:mod:`pipeline.release.canary.guard`);
3. load two copies on the judging server (the first ``--reload``), models of their own beside the served
   one, from the verified bytes of their releases (Triton's file override): ``<model>__canary_<id>-baseline``
   (the live version) and ``<model>__canary_<id>-candidate``. Not the candidate as a second version of
   ``<model>``: Triton gives unversioned requests to the highest-numbered ready version, so
   ``version_policy [live, candidate]`` would hand every production request to the candidate (read in
   Triton's model_lifecycle.cc, ``GetModel``; and seen on the tiny model). And not the served model as the
   candidate's comparison: it also serves production, so its queue is not the candidate's (see
   :mod:`pipeline.release.canary.traffic`). Production keeps going to ``<model>``, untouched, throughout;
4. traffic (:mod:`pipeline.release.canary.traffic`), then the verdict (:mod:`pipeline.release.canary.report`);
5. unload the copies; on a pass, promote exactly as ``release promote --reload`` does
   (load beside the live version, flip the pointer, retire the old version) on every server;
6. the record gets the verdict (JSON and a markdown table in ``history/<env>/<model>.canary/``).

On any failure or Ctrl-C the canary puts the servers back to the pointer itself; if it is killed, its
guard does. Until step 5's flip the pointer never moves.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.config import ParityConfig, ToleranceConfig
from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.problems import ConfigProblems, Problems
from pipeline.core.config.release_checks import check_canary
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.errors import ConfigError, ReleaseError
from pipeline.core.samples import load_feed_file, request_rows
from pipeline.parity import polygraphy as pg
from pipeline.records.canary import Agreement, Bounds, CanaryRecord, ErrorCounts, MetricsDelta, ProductionCounts, Promotion, TrafficSettings, Verdict
from pipeline.records.release import ReleaseManifest
from pipeline.release.canary import report as cr
from pipeline.release.canary import traffic as ct
from pipeline.release.canary.guard import Guard, GuardSpec, loaded_copies, mark, restore, sibling_name
from pipeline.release.evidence import reports, tags
from pipeline.release.promote import Switch, SwitchOptions, SwitchResult, reload_urls, switch
from pipeline.release.store import canaries, env_copy, pointer
from pipeline.release.store.history import HistoryEvent, now, variant_of
from pipeline.release.store.lock import HeldLock
from pipeline.release.store.store import EnvState, ReleaseStore
from pipeline.release.triton_control import TritonReloader

Say = Callable[[str], None]


def _quiet(_line: str) -> None:
    return None


@dataclass
class CanaryResult:
    """A finished canary: its record (the report), where it is stored, and the promotion when it passed."""

    report: CanaryRecord
    record: str
    promotion: SwitchResult | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.report.status == "passed"


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


def _rows(store: ReleaseStore, model: str, versions: list[int], cfg: mc.ModelConfig, extra: Path | None) -> tuple[list[ct.Feed], list[str]]:
    """Batch-1 request rows: the releases' own samples (candidate's, else live's) plus ``extra``, in the config's dtypes."""
    from tritonclient.utils import triton_to_np_dtype

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


def _check_servers(urls: list[str], model: str, live: int, timeout_s: float) -> None:
    """Every server reachable, in explicit mode, serving the live version, without a candidate left over."""
    for u in urls:
        with contextlib.closing(TritonReloader(u, model, timeout_s)) as r:
            r.check()
            r.check_explicit()
            if not r.ready(live):
                raise ReleaseError(
                    f"Triton at {r.url} does not serve version {live} of '{model}', the live version of this environment",
                    fix="start it on the environment (`release list` prints the command) and --load-model the model",
                )
            left = loaded_copies(r, model)
            if left:
                raise ReleaseError(f"copies of an earlier canary ({', '.join(left)}) are still loaded on {r.url}", fix="run `release canary --env <env> --abort` first")


@dataclass(frozen=True)
class _Prepared:
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


def _prepare(store: ReleaseStore, cand: Candidate, opts: SwitchOptions, cfg: CanaryConfig, parity: ParityConfig, inputs: Path | None) -> _Prepared:
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
    _check_servers(list(opts.reload), model, live, cfg.load_timeout_s)
    return _Prepared(model, live, variant, variant_name, state, {live: live_cfg, version: cand_cfg}, files, rows, sources, _tolerance(m, parity))


def _new_record(rid: str, env: str, version: int, p: _Prepared, servers: list[str], cfg: CanaryConfig) -> CanaryRecord:
    """The record of a canary about to load its copies (``running``)."""
    traffic = TrafficSettings(str(cfg.traffic), cfg.duration_s, cfg.share, cfg.request_rate, cfg.rounds, len(p.rows), p.sources)
    return CanaryRecord(
        id=rid,
        model=p.model,
        env=env,
        live=p.live,
        candidate=version,
        variant=p.variant_name,
        status="running",
        started_at=now(),
        server=servers[0],
        servers=servers,
        copies={ct.LIVE: sibling_name(p.model, rid, "baseline"), ct.CANDIDATE: sibling_name(p.model, rid, "candidate")},
        traffic=traffic,
        bounds=Bounds(cfg.max_p99_ratio, cfg.max_error_rate, cfg.min_round_requests),
        by=f"{os.environ.get('USER', '?')}@{socket.gethostname()} pid {os.getpid()}",
    )


def run_canary(
    store: ReleaseStore,
    cand: Candidate,
    opts: SwitchOptions,
    cfg: CanaryConfig,
    parity: ParityConfig,
    inputs: Path | None = None,
    metrics: str | None = None,
    say: Say = _quiet,
) -> CanaryResult:
    """Judge ``cand`` against the live version of its environment on the first server of ``opts.reload``; promote it on every server if it passes.

    ``inputs``: more rows to replay; ``metrics``: Triton's metrics endpoint (default: the judging server's host, port 8002).
    Returns the result for a pass and for a fail (the CLI turns a fail into exit code 1).

    Raises:
        ReleaseError: a refusal of step 1 (nothing changed), or a failure on the way (the servers are put back to the pointer).
        KeyboardInterrupt: after the same cleanup.
    """
    t0 = time.perf_counter()
    store.check_env(cand.env)
    cand = replace(cand, model=store.resolve_model(cand.model))
    store.manifest(str(cand.model), cand.version)  # "does not exist" first, with the versions that do
    if not opts.reload:
        raise ReleaseError("a canary needs the Triton server(s) serving the environment", fix="pass --reload <host:port> (HTTP, explicit model-control mode)")
    with store.env_lock(cand.env, str(cand.model), f"canary {cand.model} v{cand.version} in {cand.env}") as lock:
        p = _prepare(store, cand, opts, cfg, parity, inputs)
        rid = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-v{cand.version}"
        rec = _new_record(rid, cand.env, cand.version, p, list(opts.reload), cfg)
        # Step 2: the guard first, then the record (``running``).
        spec = GuardSpec(store.url, store.environments, store.lock_lease_s, cand.env, p.model, rec.servers, rid, os.getpid(), cfg.load_timeout_s, _promotion(cand, p, rid))
        run = _Run(store, cand, p, opts, cfg, rec, Guard(spec), say, t0)
        run.record = cr.write_record(store.fs, rec)
        run.timings["checks_s"] = time.perf_counter() - t0
        judge = TritonReloader(run.rec.server, p.model, cfg.load_timeout_s)
        try:
            run.judge_and_switch(judge, metrics or f"{judge.url.rsplit(':', 1)[0]}:8002", lock)
        except BaseException as e:
            run.put_back(e)
            raise
        finally:
            judge.close()
        run.finish()
    return CanaryResult(run.rec, store.fs.show(run.record), run.promotion, run.rec.timings or {})


def _promotion(cand: Candidate, p: _Prepared, rid: str) -> HistoryEvent:
    """The promotion a pass makes (the guard records it if the canary dies after the flip)."""
    return HistoryEvent(action="promote", version=cand.version, previous=p.live, variant=p.variant_name, canary=rid)


@dataclass
class _Run:
    """Steps 3-6 of one canary, once its guard runs and its record is written: traffic, verdict, the switch on a pass."""

    store: ReleaseStore
    cand: Candidate
    p: _Prepared
    opts: SwitchOptions
    cfg: CanaryConfig
    rec: CanaryRecord
    guard: Guard
    say: Say
    t0: float
    timings: dict[str, float] = field(default_factory=dict)
    record: str = ""  # the record's store path
    switching: bool = False
    promotion: SwitchResult | None = None

    @property
    def sides(self) -> list[ct.Endpoint]:
        """The baseline copy of the live version and the candidate's copy, beside the served model."""
        return [ct.Endpoint(side, name, self.p.live if side == ct.LIVE else self.cand.version) for side, name in self.rec.copies.items()]

    def judge_and_switch(self, judge: TritonReloader, metrics_url: str, lock: HeldLock) -> None:
        """Steps 3-5: load the copies, send the traffic, judge, unload; on a pass, switch every server."""
        p, sides, version = self.p, self.sides, self.cand.version
        mb = sum(len(b) for f in p.files.values() for b in f.values()) / 1e6
        self.say(
            f"  loading: a baseline of version {p.live} and the candidate version {version} on {judge.url} as {[ep.model for ep in sides]} "
            f"({mb:.1f} MB); '{p.model}' keeps serving production"
        )
        t = time.perf_counter()
        for ep in sides:
            judge.load_beside(ep.model, p.configs[ep.version], ep.version, p.files[ep.version])
        self.timings["load_copies_s"] = time.perf_counter() - t
        self.say(f"  traffic: {self.cfg.traffic} for {self.cfg.duration_s:g} s ({len(p.rows)} sample rows from {', '.join(p.sources)})")
        t = time.perf_counter()
        _record_judgement(self.rec, _judge(judge, [*sides, ct.Endpoint(ct.PRODUCTION, p.model, p.live, pinned=False)], p, self.cfg, metrics_url), self.cfg)
        self.timings["traffic_s"] = time.perf_counter() - t
        for ep in sides:
            judge.unload_beside(ep.model, ep.version)
        if self.rec.verdict is not None and self.rec.verdict.passed:
            self._switch(lock)
        self.rec.status = "passed" if self.promotion else "failed"

    def _switch(self, lock: HeldLock) -> None:
        """Step 5 on a pass: promote exactly as ``release promote --reload`` does, on every server."""
        p, env, version = self.p, self.cand.env, self.cand.version
        self.say(f"  switch: promoting version {version} on {', '.join(self.opts.reload)} (load beside {p.live}, flip the pointer, retire {p.live})")
        self.guard.tell("switching")
        self.switching = True
        t = time.perf_counter()
        sw = Switch(env, p.model, version, "promote", p.state, p.variant, HistoryEvent(canary=self.rec.id))
        promotion = self.promotion = switch(self.store, sw, self.opts, lock)
        self.timings["switch_s"] = time.perf_counter() - t
        self.rec.promotion = Promotion(p.live, version, promotion.copy, promotion.timings, str(promotion.tag) if promotion.tag else None)
        if self.rec.verdict is not None:
            self.rec.verdict.summary = f"promoted: the pointer of '{env}' went {p.live} -> {version}"

    def put_back(self, e: BaseException) -> None:
        """On any failure or Ctrl-C: record why, put the servers back to the pointer, finish the record."""
        interrupted = isinstance(e, KeyboardInterrupt)
        self.rec.status = "interrupted" if interrupted else "error"
        self.rec.note = "interrupted (Ctrl-C)" if interrupted else getattr(e, "what", f"{type(e).__name__}: {e}")
        self.rec.cleanup = restore(
            self.store,
            self.cand.env,
            self.p.model,
            self.rec.servers,
            env_model=self.switching,
            take_lock=False,
            timeout_s=self.cfg.load_timeout_s,
            event=_promotion(self.cand, self.p, self.rec.id) if self.switching else None,
        )
        self.finish()

    def finish(self) -> None:
        """Step 6: the record gets its end and timings; the guard is told the canary cleaned up after itself."""
        self.timings["total_s"] = time.perf_counter() - self.t0
        self.rec.finished_at = now()
        self.rec.timings = {k: round(v, 3) for k, v in self.timings.items()}
        cr.write_record(self.store.fs, self.rec)
        self.guard.done()


@dataclass(frozen=True)
class _Measured:
    """What the traffic showed: the outputs compared, the paired latency, the errors, and Triton's /metrics."""

    outputs: Agreement
    latency: ct.Latency
    errors: ErrorCounts
    metrics: MetricsDelta


def _judge(judge: TritonReloader, sides: list[ct.Endpoint], p: _Prepared, cfg: CanaryConfig, metrics_url: str) -> _Measured:
    """Send the traffic; measure the baseline, the candidate and the served model (``sides``, in that order)."""
    live, cand, _ = sides
    cand_cfg = p.configs[cand.version]
    pairs = ct.OutputPairs([o.name for o in cand_cfg.output])
    before = {ep.side: ct.version_counts(judge.client, ep) for ep in sides}
    m_before = ct.version_metrics(metrics_url, sides)
    sent, timed, messages = _send(judge.url, sides, p.rows, cand_cfg.max_batch_size > 0, cfg, pairs)
    after = {ep.side: ct.version_counts(judge.client, ep) for ep in sides}
    m_after = ct.version_metrics(metrics_url, sides)  # right after the statistics, so both count the same span
    delta = {s: {k: after[s][k] - before[s][k] for k in after[s]} for s in after}
    kind, tol = p.tolerance
    return _Measured(
        cr.agreement(pairs, tol, kind, live.label, cand.label),
        ct.paired_rounds(timed, cfg.rounds, cfg.min_round_requests),
        _error_counts(sent, delta, messages),
        ct.metrics_delta(m_before, m_after),
    )


def _send(url: str, sides: list[ct.Endpoint], rows: list[ct.Feed], batched: bool, cfg: CanaryConfig, pairs: ct.OutputPairs) -> tuple[list[ct.Sent], list[ct.Sent], list[str]]:
    """The traffic: every request sent, the requests latency is judged on, and the error messages.

    Replay traffic is judged on all of its requests. Real traffic sends one pass of every row to both copies
    first (the output comparison, and a warm-up), then the load, which alone is judged; both count for errors.
    """
    live, cand, _ = sides
    first, messages = ct.replay(url, live, cand, rows, pairs, cfg.duration_s if cfg.traffic == CanaryTraffic.replay else 0.0)
    if cfg.traffic != CanaryTraffic.real:
        return first, first, messages
    from pipeline.serving.perf_analyzer import locate_perf_analyzer

    with tempfile.TemporaryDirectory(prefix="canary-") as tmp:
        load, notes = ct.share_load(locate_perf_analyzer(), url, sides, rows, batched, ct.Load(cfg.request_rate, cfg.share, cfg.duration_s), Path(tmp))
    return first + load, load, messages + notes


def _error_counts(sent: list[ct.Sent], delta: dict[str, dict[str, int]], messages: list[str]) -> ErrorCounts:
    """The failed requests of each side: Triton's counts during the canary (``delta``) and what the client saw."""

    def count(side: str, failed: bool = False) -> int:
        return sum(1 for x in sent if x.side == side and (x.ms is None or not failed))

    rate, failed, requests = cr.error_rate(delta[ct.CANDIDATE], count(ct.CANDIDATE, True), count(ct.CANDIDATE))
    production = ProductionCounts(delta[ct.PRODUCTION]["fail"], delta[ct.PRODUCTION]["success"], count(ct.PRODUCTION))
    return ErrorCounts(rate, failed, requests, count(ct.LIVE, True), count(ct.LIVE), production, delta, messages)


def _record_judgement(rec: CanaryRecord, measured: _Measured, cfg: CanaryConfig) -> None:
    """The record gets what was measured, the checks against ``release.canary``'s bounds, and the verdict."""
    checks = cr.verdict(measured.outputs, measured.latency, measured.errors, cfg)
    bad = [f"{c.name}: {c.detail}" for c in checks if not c.passed]
    rec.outputs, rec.latency, rec.errors, rec.metrics, rec.checks = measured.outputs, measured.latency.summary(), measured.errors, measured.metrics, checks
    rec.verdict = Verdict(not bad, ("; ".join(bad) + f"; the copies were unloaded, the pointer still names {rec.live}") if bad else "")
    rec.notes += measured.errors.messages


def abort_canary(store: ReleaseStore, env: str, model: str | None = None, servers: str | list[str] | None = None, timeout_s: float = 120.0) -> list[str]:
    """Clean up after a canary that died with its guard: unload its copies and reload the model from the pointer.

    The servers are ``servers`` or, when none are given, those the last canary recorded.

    Raises:
        ReleaseError: another command holds the environment's lock (a canary still running), or no server is known.
    """
    store.check_env(env)
    model = store.resolve_model(model)
    with store.env_lock(env, model, f"canary abort of {model} in {env}"):
        rec = canaries.read(store.fs, env, model)
        urls = reload_urls(servers) or (rec.servers if rec else [])
        if not urls:
            raise ReleaseError(f"no canary of '{model}' in '{env}' is on record, so the servers to clean up are unknown", fix="pass --reload <host:port>")
        lines = restore(store, env, model, urls, env_model=True, take_lock=False, timeout_s=timeout_s)
        if rec is not None and not rec.final:
            mark(store, env, model, rec.id, "aborted", "cleaned up by `release canary --abort`", lines)
            lines.append(f"record {rec.id}: was '{rec.status}', now 'aborted'")
    return lines
