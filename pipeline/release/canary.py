"""``release canary``: serve a candidate beside the live version, judge it, then promote it or unload it.

Order, all under the environment's lock (so no promote or rollback runs meanwhile):

1. refuse before anything loads: the candidate is not a release, is already live, nothing is live, its
   inputs/outputs differ from the live version's, its files or signature fail, no samples to replay,
   a server is unreachable, not in explicit model-control mode or not serving the live version, or
   copies of an earlier canary are still loaded there;
2. write the canary's record (``running``) and start its guard (:mod:`pipeline.release.canary_guard`);
3. load two copies on the judging server (the first ``--reload``), models of their own beside the served
   one, from the verified bytes of their releases (Triton's file override): ``<model>__canary_<id>-baseline``
   (the live version) and ``<model>__canary_<id>-candidate``. Not the candidate as a second version of
   ``<model>``: Triton gives unversioned requests to the highest-numbered ready version, so
   ``version_policy [live, candidate]`` would hand every production request to the candidate (read in
   Triton's model_lifecycle.cc, ``GetModel``; and seen on the tiny model). And not the served model as the
   candidate's comparison: it also serves production, so its queue is not the candidate's (see
   :mod:`pipeline.release.canary_traffic`). Production keeps going to ``<model>``, untouched, throughout;
4. traffic (:mod:`pipeline.release.canary_traffic`), then the verdict (:mod:`pipeline.release.canary_report`);
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.config import ParityConfig
from pipeline.core.config.rules import check_canary
from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.problems import ConfigProblems, Problems
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.errors import ConfigError, ReleaseError
from pipeline.core.samples import load_feed_file, request_rows
from pipeline.parity import polygraphy as pg
from pipeline.release import canary_report as cr
from pipeline.release import canary_traffic as ct
from pipeline.release import env_copy, evidence, gto_tags, pointer
from pipeline.release import manifest as mf
from pipeline.release.canary_guard import Guard, loaded_copies, restore, sibling_name
from pipeline.release.promote import SwitchResult, reload_urls, switch, variant_of
from pipeline.release.store import ReleaseStore
from pipeline.release.triton_control import TritonReloader

Say = Callable[[str], None]


@dataclass
class CanaryResult:
    """A finished canary: its record (the report), where it is stored, and the promotion when it passed."""

    report: dict[str, Any]
    record: str
    promotion: SwitchResult | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.report["status"] == "passed"


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


def signature(cfg: mc.ModelConfig) -> dict[str, Any]:
    """What a client sends and gets back: batching, and each input's and output's name, type and shape."""

    def io(ts: Any) -> list[str]:
        return sorted(f"{t.name}: {mc.DataType.Name(t.data_type).removeprefix('TYPE_')}{list(t.dims)}" for t in ts)

    return {"batched": cfg.max_batch_size > 0, "inputs": io(cfg.input), "outputs": io(cfg.output)}


def _check_signatures(live: mc.ModelConfig, cand: mc.ModelConfig, lv: int, cv: int) -> None:
    a, b = signature(live), signature(cand)
    if a != b:
        diff = {k: f"live v{lv} {a[k]} vs candidate v{cv} {b[k]}" for k in a if a[k] != b[k]}
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
        rel = f"{store.release_rel(model, v)}/files/{evidence.SAMPLES_FILE}"
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


def _model_files(store: ReleaseStore, model: str, version: int, m: dict[str, Any]) -> dict[str, bytes]:
    """What Triton needs of a release's model directory (its version directory, and the warmup rows its config
    names, at ``warmup/<N>/`` as in an environment), read once and checked byte for byte against its manifest;
    the configs and samples are not sent."""
    rel = f"{store.release_rel(model, version)}/files"
    out = {}
    for f in store.fs.walk_files(rel):
        if f == "config.pbtxt" or f.startswith(("configs/", "samples/")):
            continue
        data = store.fs.read_bytes(f"{rel}/{f}")
        if hashlib.sha256(data).hexdigest() != m["files"].get(f, {}).get("sha256"):
            raise ReleaseError(f"{f} of release {version} changed while it was read", fix="do not promote it; check the store")
        out[env_copy.env_file(f, version)] = data
    return out


def _tolerance(m: dict[str, Any], parity: ParityConfig) -> tuple[str, Any]:
    """The parity tolerance of the artifact the release serves (fp32, fp16, trt; fp32 when the manifest does not say)."""
    served = (m.get("parity") or {}).get("served") or {}
    kinds = [str(s.get("artifact", "fp32")).split("@")[0] for s in served.values()]
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


def run_canary(  # noqa: PLR0913, PLR0915
    store: ReleaseStore,
    env: str,
    version: int,
    servers: str | list[str],
    cfg: CanaryConfig,
    parity: ParityConfig,
    model: str | None = None,
    variant: str | None = None,
    inputs: Path | None = None,
    metrics: str | None = None,
    public_key: str | None = None,
    git_repo: str | None = None,
    say: Say = lambda s: None,
) -> CanaryResult:
    """Judge release ``version`` against the live version of ``env`` on the first server; promote it on every server if it passes.

    Returns the result for a pass and for a fail (the CLI turns a fail into exit code 1).

    Raises:
        ReleaseError: a refusal of step 1 (nothing changed), or a failure on the way (the servers are put back to the pointer).
        KeyboardInterrupt: after the same cleanup.
    """
    t0 = time.perf_counter()
    store.check_env(env)
    model = store.resolve_model(model)
    store.manifest(model, version)  # "does not exist" first, with the versions that do
    urls = reload_urls(servers)
    if not urls:
        raise ReleaseError("a canary needs the Triton server(s) serving the environment", fix="pass --reload <host:port> (HTTP, explicit model-control mode)")
    with store.env_lock(env, model, f"canary {model} v{version} in {env}") as lock:
        state = store.env_state(env, model)
        store.check_pointer(state)
        if state.live is None:
            raise ReleaseError(f"nothing is live in '{env}', so there is nothing to compare version {version} with", fix=f"promote first: `release promote --to {env}`")
        if state.live == version:
            raise ReleaseError(f"version {version} is already live in '{env}'", fix="canary another version")
        live = state.live
        variant = variant or variant_of(state.history, live)
        # The pointer's config, its warmup reading the live release's rows (a pointer written before it did, too).
        live_cfg = pointer.for_version(pointer.parse_config(store.fs.read_text(f"{store.model_rel(env, model)}/config.pbtxt"), "the pointer"), live)
        cand_cfg, variant_name = store.release_config(model, version, variant)
        _check_signatures(live_cfg, cand_cfg, live, version)
        m = store.verify_release(model, version)
        store.check_signature(model, version, public_key)
        gto_tags.check_assignable(git_repo, model, version, (m.get("git") or {}).get("commit"))
        rows, sources = _rows(store, model, [version, live], cand_cfg, inputs)
        files = {live: _model_files(store, model, live, store.verify_release(model, live)), version: _model_files(store, model, version, m)}
        _check_servers(urls, model, live, cfg.load_timeout_s)
        rid = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-v{version}"
        sides = [ct.Endpoint(ct.LIVE, sibling_name(model, rid, "baseline"), live), ct.Endpoint(ct.CANDIDATE, sibling_name(model, rid, "candidate"), version)]
        configs = {live: live_cfg, version: cand_cfg}
        report: dict[str, Any] = {
            "schema": cr.SCHEMA_VERSION,
            "id": rid,
            "model": model,
            "env": env,
            "live": live,
            "candidate": version,
            "variant": variant_name,
            "status": "running",
            "started_at": mf.now(),
            "server": urls[0],
            "servers": urls,
            "copies": {ep.side: ep.model for ep in sides},
            "traffic": {
                "kind": str(cfg.traffic),
                "duration_s": cfg.duration_s,
                "share": cfg.share,
                "request_rate": cfg.request_rate,
                "rounds": cfg.rounds,
                "rows": len(rows),
                "samples_from": sources,
            },
            "bounds": {"max_p99_ratio": cfg.max_p99_ratio, "max_error_rate": cfg.max_error_rate, "min_round_requests": cfg.min_round_requests},
            "by": f"{os.environ.get('USER', '?')}@{socket.gethostname()} pid {os.getpid()}",
            "notes": [],
        }
        event = {"action": "promote", "version": version, "previous": live, "variant": variant_name, "canary": rid}
        guard = Guard(
            {
                "store": store.url,
                "environments": store.environments,
                "lease_s": store.lock_lease_s,
                "env": env,
                "model": model,
                "servers": urls,
                "record": rid,
                "parent": os.getpid(),
                "timeout_s": cfg.load_timeout_s,
                "event": event,
            }
        )
        record = cr.write_record(store.fs, report)
        timings = {"checks_s": time.perf_counter() - t0}
        switching = False
        judge = TritonReloader(urls[0], model, cfg.load_timeout_s)
        try:
            say(
                f"  loading: a baseline of version {live} and the candidate version {version} on {judge.url} as {[ep.model for ep in sides]} "
                f"({sum(len(b) for f in files.values() for b in f.values()) / 1e6:.1f} MB); '{model}' keeps serving production"
            )
            t = time.perf_counter()
            for ep in sides:
                judge.load_beside(ep.model, configs[ep.version], ep.version, files[ep.version])
            timings["load_copies_s"] = time.perf_counter() - t
            say(f"  traffic: {cfg.traffic} for {cfg.duration_s:g} s ({len(rows)} sample rows from {', '.join(sources)})")
            t = time.perf_counter()
            production = ct.Endpoint(ct.PRODUCTION, model, live, pinned=False)
            _judge(report, judge, [*sides, production], rows, cand_cfg, cfg, *_tolerance(m, parity), metrics or f"{judge.url.rsplit(':', 1)[0]}:8002")
            timings["traffic_s"] = time.perf_counter() - t
            for ep in sides:
                judge.unload_beside(ep.model, ep.version)
            promotion = None
            if report["verdict"]["passed"]:
                say(f"  switch: promoting version {version} on {', '.join(urls)} (load beside {live}, flip the pointer, retire {live})")
                guard.tell("switching")
                switching = True
                t = time.perf_counter()
                promotion = switch(store, env, model, version, state, "promote", variant, urls, public_key, git_repo, {"canary": rid}, lock)
                timings["switch_s"] = time.perf_counter() - t
                report["promotion"] = {"from": live, "to": version, "copy": promotion.copy, "timings": promotion.timings, "tag": str(promotion.tag) if promotion.tag else None}
                report["verdict"]["summary"] = f"promoted: the pointer of '{env}' went {live} -> {version}"
            report["status"] = "passed" if promotion else "failed"
        except BaseException as e:
            report["status"] = "interrupted" if isinstance(e, KeyboardInterrupt) else "error"
            report["note"] = "interrupted (Ctrl-C)" if isinstance(e, KeyboardInterrupt) else getattr(e, "what", f"{type(e).__name__}: {e}")
            report["cleanup"] = restore(store, env, model, urls, env_model=switching, take_lock=False, timeout_s=cfg.load_timeout_s, event=event if switching else None)
            _finish(store, report, timings, t0)
            guard.done()
            raise
        finally:
            judge.close()
        _finish(store, report, timings, t0)
        guard.done()
    return CanaryResult(report, store.fs.show(record), promotion, report["timings"])


def _finish(store: ReleaseStore, report: dict[str, Any], timings: dict[str, float], t0: float) -> None:
    timings["total_s"] = time.perf_counter() - t0
    report.update(finished_at=mf.now(), timings={k: round(v, 3) for k, v in timings.items()})
    cr.write_record(store.fs, report)


def _judge(  # noqa: PLR0913
    report: dict[str, Any],
    judge: TritonReloader,
    sides: list[ct.Endpoint],
    rows: list[ct.Feed],
    cand_cfg: mc.ModelConfig,
    cfg: CanaryConfig,
    kind: str,
    tol: Any,
    metrics_url: str,
) -> None:
    """Send the traffic, measure the baseline, the candidate and the served model, and fill the report's checks and verdict."""
    live, cand, production = sides
    pairs = ct.OutputPairs([o.name for o in cand_cfg.output])
    before = {ep.side: ct.version_counts(judge.client, ep) for ep in sides}
    m_before = ct.version_metrics(metrics_url, sides)
    first, errors = ct.replay(judge.url, live, cand, rows, pairs, cfg.duration_s if cfg.traffic == CanaryTraffic.replay else 0.0)
    sent = first
    if cfg.traffic == CanaryTraffic.real:  # after one pass of every row to both (the output comparison, and a warm-up)
        from pipeline.serving.perf_analyzer import locate_perf_analyzer

        with tempfile.TemporaryDirectory(prefix="canary-") as tmp:
            sent, notes = ct.share_load(locate_perf_analyzer(), judge.url, sides, rows, cand_cfg.max_batch_size > 0, cfg.request_rate, cfg.share, cfg.duration_s, Path(tmp))
        errors += notes
    after = {ep.side: ct.version_counts(judge.client, ep) for ep in sides}
    m_after = ct.version_metrics(metrics_url, sides)  # right after the statistics, so both count the same span
    delta = {s: {k: after[s][k] - before[s][k] for k in after[s]} for s in after}
    latency = ct.paired_rounds(sent, cfg.rounds, cfg.min_round_requests)
    if sent is not first:
        sent = first + sent  # every request counts for the error rates, the comparison pass too
    agree = cr.agreement(pairs, tol, kind, live.label, cand.label)

    def count(side: str, failed: bool = False) -> int:
        return sum(1 for x in sent if x.side == side and (x.ms is None or not failed))

    rate, failed, requests = cr.error_rate(delta[ct.CANDIDATE], count(ct.CANDIDATE, True), count(ct.CANDIDATE))
    errs = {
        "rate": rate,
        "failed": failed,
        "requests": requests,
        "live_failed": count(ct.LIVE, True),
        "live_requests": count(ct.LIVE),
        "production": {"failed_during_canary": delta[ct.PRODUCTION]["fail"], "answered_during_canary": delta[ct.PRODUCTION]["success"], "sent_by_canary": count(ct.PRODUCTION)},
        "triton": delta,
        "messages": errors,
    }
    checks = cr.verdict(agree, latency, errs, cfg)
    bad = [f"{c.name}: {c.detail}" for c in checks if not c.passed]
    report.update(
        outputs=agree,
        latency=latency.to_json(),
        errors=errs,
        metrics=ct.metrics_delta(m_before, m_after),
        checks=[asdict(c) for c in checks],
        verdict={"passed": not bad, "summary": "; ".join(bad) + f"; the copies were unloaded, the pointer still names {live.version}" if bad else ""},
    )
    if errors:
        report["notes"] += errors


def abort_canary(store: ReleaseStore, env: str, model: str | None = None, servers: str | list[str] | None = None, timeout_s: float = 120.0) -> list[str]:
    """Clean up after a canary that died with its guard: unload its copies and reload the model from the pointer.

    The servers are ``servers`` or, when none are given, those the last canary recorded.

    Raises:
        ReleaseError: another command holds the environment's lock (a canary still running), or no server is known.
    """
    store.check_env(env)
    model = store.resolve_model(model)
    with store.env_lock(env, model, f"canary abort of {model} in {env}"):
        rec = cr.read_record(store.fs, env, model)
        urls = reload_urls(servers) or (rec or {}).get("servers") or []
        if not urls:
            raise ReleaseError(f"no canary of '{model}' in '{env}' is on record, so the servers to clean up are unknown", fix="pass --reload <host:port>")
        lines = restore(store, env, model, urls, env_model=True, take_lock=False, timeout_s=timeout_s)
        if rec is not None and rec.get("status") not in cr.FINAL:
            from pipeline.release.canary_guard import mark

            mark(store, env, model, rec["id"], "aborted", "cleaned up by `release canary --abort`", lines)
            lines.append(f"record {rec['id']}: was '{rec.get('status')}', now 'aborted'")
    return lines
