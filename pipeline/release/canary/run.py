"""``release canary``: serve a candidate beside the live version, judge it, then promote it or unload it.

Order, all under the environment's lock (so no promote or rollback runs meanwhile):

1. refuse before anything loads (:mod:`pipeline.release.canary.prepare`): the candidate is not a release, is already live, nothing is live, its
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
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline.core.config import ParityConfig
from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.errors import ReleaseError
from pipeline.records.canary import Bounds, CanaryRecord, ErrorCounts, MetricsDelta, ProductionCounts, Promotion, TrafficSettings, Verdict, Agreement
from pipeline.release.canary import report as cr
from pipeline.release.canary import traffic as ct
from pipeline.release.canary.guard import Guard, GuardSpec, mark, restore, sibling_name
from pipeline.release.canary.prepare import Candidate, Prepared, prepare
from pipeline.release.promote import Switch, SwitchOptions, SwitchResult, reload_urls
from pipeline.release.promote_set import callee, followers, run_plan, switch_followed
from pipeline.release.store import canaries, pointer
from pipeline.release.store.history import HistoryEvent, now
from pipeline.release.store.lock import HeldLock
from pipeline.release.store.store import ReleaseStore
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


def _new_record(rid: str, env: str, version: int, p: Prepared, servers: list[str], cfg: CanaryConfig) -> CanaryRecord:
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
    with contextlib.ExitStack() as locks:
        lock = locks.enter_context(store.env_lock(cand.env, str(cand.model), f"canary {cand.model} v{cand.version} in {cand.env}"))
        # The models that call this one (its text endpoint) call its new version after a pass: their locks too.
        # The model a text endpoint calls too: a candidate built with another version of it switches with it.
        related = [*followers(store, cand.env, str(cand.model)), *callee(store, str(cand.model), cand.version)]
        follow = {m: locks.enter_context(store.env_lock(cand.env, m, f"canary of {cand.model} v{cand.version} in {cand.env}")) for m in related}
        p = prepare(store, cand, opts, cfg, parity, inputs)
        rid = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-v{cand.version}"
        rec = _new_record(rid, cand.env, cand.version, p, list(opts.reload), cfg)
        # Step 2: the guard first, then the record (``running``).
        spec = GuardSpec(store.url, store.environments, store.lock_lease_s, cand.env, p.model, rec.servers, rid, os.getpid(), cfg.load_timeout_s, _promotion(cand, p, rid))
        run = _Run(store, cand, p, opts, cfg, rec, Guard(spec), say, t0)
        run.record = cr.write_record(store.fs, rec)
        run.timings["checks_s"] = time.perf_counter() - t0
        judge = TritonReloader(run.rec.server, p.model, cfg.load_timeout_s)
        try:
            run.judge_and_switch(judge, metrics or f"{judge.url.rsplit(':', 1)[0]}:8002", {str(cand.model): lock, **follow})
        except BaseException as e:
            run.put_back(e)
            raise
        finally:
            judge.close()
        run.finish()
    return CanaryResult(run.rec, store.fs.show(run.record), run.promotion, run.rec.timings or {})


def _promotion(cand: Candidate, p: Prepared, rid: str) -> HistoryEvent:
    """The promotion a pass makes (the guard records it if the canary dies after the flip)."""
    return HistoryEvent(action="promote", version=cand.version, previous=p.live, variant=p.variant_name, canary=rid)


@dataclass
class _Run:
    """Steps 3-6 of one canary, once its guard runs and its record is written: traffic, verdict, the switch on a pass."""

    store: ReleaseStore
    cand: Candidate
    p: Prepared
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

    def judge_and_switch(self, judge: TritonReloader, metrics_url: str, locks: dict[str, HeldLock]) -> None:
        """Steps 3-5: load the copies, send the traffic, judge, unload; on a pass, switch every server."""
        p, sides, version = self.p, self.sides, self.cand.version
        mb = sum(len(b) for f in p.files.values() for b in f.values()) / 1e6
        self.say(
            f"  loading: a baseline of version {p.live} and the candidate version {version} on {judge.url} as {[ep.model for ep in sides]} "
            f"({mb:.1f} MB); '{p.model}' keeps serving production"
        )
        t = time.perf_counter()
        configs = dict(p.configs)
        own = sibling_name(p.model, self.rec.id, "candidate-model")  # used when the candidate brings its own model
        if p.own is not None:  # the candidate's copy calls a copy of the model it was built with
            self.say(f"  set: the candidate calls version {p.own.version} of '{p.own.name}' (built with it; the environment serves {p.own.live}) as {own}")
            judge.load_beside(own, p.own.config, p.own.version, p.own.files)
            configs[version] = p.own.called_by(configs[version], own)
        for ep in sides:
            judge.load_beside(ep.model, configs[ep.version], ep.version, p.files[ep.version])
        self.timings["load_copies_s"] = time.perf_counter() - t
        self.say(f"  traffic: {self.cfg.traffic} for {self.cfg.duration_s:g} s ({len(p.rows)} sample rows from {', '.join(p.sources)})")
        t = time.perf_counter()
        _record_judgement(self.rec, _judge(judge, [*sides, ct.Endpoint(ct.PRODUCTION, p.model, p.live, pinned=False)], p, self.cfg, metrics_url), self.cfg)
        self.timings["traffic_s"] = time.perf_counter() - t
        for ep in sides:
            judge.unload_beside(ep.model, ep.version)
        if p.own is not None:
            judge.unload_beside(own, p.own.version)
        if self.rec.verdict is not None and self.rec.verdict.passed:
            self._switch(locks)
        self.rec.status = "passed" if self.promotion else "failed"

    def _switch(self, locks: dict[str, HeldLock]) -> None:
        """Step 5 on a pass: promote exactly as ``release promote --reload`` does, on every server."""
        p, env, version = self.p, self.cand.env, self.cand.version
        self.say(f"  switch: promoting version {version} on {', '.join(self.opts.reload)} (load beside {p.live}, flip the pointer, retire {p.live})")
        self.guard.tell("switching")
        self.switching = True
        t = time.perf_counter()
        event = HistoryEvent(canary=self.rec.id)
        if p.own is not None:  # the set: the model at the version the candidate was judged with, then the candidate
            own = p.own
            model_sw = Switch(env, own.name, own.version, "promote", self.store.env_state(env, own.name), own.variant, event)
            sw = Switch(env, p.model, version, "promote", p.state, p.variant, event, pin=own.version)
            promotion = self.promotion = run_plan(self.store, [model_sw, sw], own.name, self.opts, locks)[-1]
        else:
            pin = pointer.pin_of(p.configs[version])  # a text endpoint: the tensor version its copy was judged with
            sw = Switch(env, p.model, version, "promote", p.state, p.variant, event, pin=pin)
            promotion = self.promotion = switch_followed(self.store, sw, self.opts, locks)[0]
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


def _judge(judge: TritonReloader, sides: list[ct.Endpoint], p: Prepared, cfg: CanaryConfig, metrics_url: str) -> _Measured:
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
