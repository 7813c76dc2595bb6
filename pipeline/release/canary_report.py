"""The canary's verdict and its record in the store's history.

The three checks, with the bounds from ``release.canary`` (checked at composition):

- outputs: the candidate's answers against the live version's on the same rows, compared the way the
  parity stage compares an artifact with its reference (Polygraphy's comparison, the parity tolerance
  of the served artifact's kind, the same per-output statistics and the same failure lines);
- latency: the paired candidate/live p99 ratio (the median over rounds) at most ``max_p99_ratio``;
- errors: the candidate's failed share of its requests at most ``max_error_rate``.

A record per canary: ``history/<env>/<model>.canary/<id>.json`` (written when the canary starts, rewritten
with the verdict, or by whoever cleaned up after it) and ``<id>.md`` (the table the CLI prints).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pipeline.core.config import ToleranceConfig
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.parity import polygraphy as pg
from pipeline.parity.report import fmt, output_failures, polygraphy_options, resolve, summarize_output, tolerance_key
from pipeline.release.canary_traffic import Latency, OutputPairs
from pipeline.release.fs import StoreFS

SCHEMA_VERSION = 1
FINAL = ("passed", "failed")  # a record in any other status was cut short (running, interrupted, killed, aborted, error)


@dataclass
class Check:
    """One line of the verdict."""

    name: str
    passed: bool
    detail: str


def agreement(pairs: OutputPairs, tol: ToleranceConfig, kind: str, live: str, candidate: str) -> dict[str, Any]:
    """The candidate's outputs against the live version's, output by output, with the parity stage's statistics.

    ``kind`` is the parity tolerance section used (``fp32``, ``fp16``, ``trt``): its failure lines name
    ``parity.<kind>.per_output.<output>.atol``.
    """
    from polygraphy.comparator import IterationResult, RunResults

    base = {"tolerance": f"parity.{kind}", "answered": pairs.answered, "distinct": len(pairs.live)}
    if not pairs.live:
        return {**base, "passed": False, "outputs": {}, "problems": ["no row was answered by both versions"]}
    ref = RunResults([(live, [IterationResult(o, runner_name=live) for o in pairs.live])])
    art = RunResults([(candidate, [IterationResult(o, runner_name=candidate) for o in pairs.candidate])])
    opts = polygraphy_options(tol, pairs.names)
    with pg.quiet():
        per_pair = pg.compare(ref, art, pg.compare_func(opts["atol"], opts["rtol"], opts["stat"], opts["quantile"]))
    outputs = {n: summarize_output(n, resolve(tol, n), [m.get(n) for m in per_pair], [a.get(n) for a in pairs.candidate], [r[n] for r in pairs.live]) for n in pairs.names}
    ok = all(o.passed for o in outputs.values())
    return {**base, "passed": ok, "outputs": {n: o.to_json() for n, o in outputs.items()}, "problems": output_failures(kind, tolerance_key(kind), outputs)}


def error_rate(counts: dict[str, int], client_errors: int, sent: int) -> tuple[float | None, int, int]:
    """The candidate's failed share: Triton's count (success + fail during the canary), or the client's if larger."""
    served = counts.get("success", 0) + counts.get("fail", 0)
    server = counts.get("fail", 0) / served if served else None
    client = client_errors / sent if sent else None
    rates = [r for r in (server, client) if r is not None]
    return (max(rates) if rates else None), max(counts.get("fail", 0), client_errors), max(served, sent)


def verdict(agree: dict[str, Any], latency: Latency | None, errors: dict[str, Any], cfg: CanaryConfig) -> list[Check]:
    """The three checks against ``release.canary``'s bounds."""
    checks = [
        Check(
            "outputs",
            bool(agree["passed"]),
            "; ".join(agree.get("problems") or []) or f"{agree['distinct']} distinct answers of {agree['answered']} rows within {agree['tolerance']}",
        )
    ]
    if latency is None:
        checks.append(Check("latency", False, "no latency was measured"))
    else:
        est = latency.p99_ratio
        if est.value is None:
            checks.append(
                Check(
                    "latency",
                    False,
                    f"no round had {latency.min_round_requests} answered requests on both sides "
                    f"(release.canary.min_round_requests) in {latency.window_s:.1f} s: lengthen release.canary.duration_s or lower rounds",
                )
            )
        else:
            ok = est.value <= cfg.max_p99_ratio
            checks.append(Check("latency", ok, f"p99 candidate/live {est.text()} {'<=' if ok else '>'} {cfg.max_p99_ratio:g} (release.canary.max_p99_ratio)"))
    rate = errors.get("rate")
    if rate is None:
        checks.append(Check("errors", False, "the candidate answered no request"))
    else:
        ok = rate <= cfg.max_error_rate
        checks.append(
            Check(
                "errors",
                ok,
                f"{errors['failed']} of {errors['requests']} candidate requests failed ({rate:.2%}) {'<=' if ok else '>'} {cfg.max_error_rate:.2%} (release.canary.max_error_rate)",
            )
        )
    return checks


# ---------------------------------------------------------------- rendering
def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g} ms"


def markdown(report: dict[str, Any]) -> str:
    """The short table: one row per check, the live and candidate numbers side by side, the bound, the result."""
    live, cand = f"live v{report['live']} (baseline copy)", f"candidate v{report['candidate']}"
    t = report.get("traffic", {})
    head = (
        f"canary of {report['model']} v{report['candidate']} against live v{report['live']} in '{report['env']}' on {report.get('server')}: "
        f"{t.get('kind')} traffic, {t.get('duration_s', 0):g} s{(', share %g' % t['share']) if t.get('kind') == 'real' else ''}, {report.get('started_at', '')}"
    )
    rows = [f"| check | {live} | {cand} | bound | result |", "|---|---|---|---|---|"]
    checks = {c["name"]: c for c in report.get("checks", [])}
    agree = report.get("outputs") or {}
    for name, o in (agree.get("outputs") or {}).items():
        rows.append(
            f"| outputs: {name} | reference | max abs {fmt(o['max_abs'])}, mean abs {fmt(o['mean_abs'])}, {o['failed_samples']}/{o['samples']} differ "
            f"| {agree['tolerance']}: atol {fmt(o['atol'])}, rtol {fmt(o['rtol'])}, {o['stat']} | {_result(checks, 'outputs')} |"
        )
    lat = report.get("latency")
    if lat:
        p99, p50 = (_estimate_text(lat[k]) for k in ("p99_ratio", "p50_ratio"))
        bound = report["bounds"]["max_p99_ratio"]
        rows.append(f"| p99 latency | {_ms(lat['live']['p99_ms'])} | {_ms(lat['candidate']['p99_ms'])} | ratio {p99} <= {bound:g} | {_result(checks, 'latency')} |")
        rows.append(f"| p50 latency | {_ms(lat['live']['p50_ms'])} | {_ms(lat['candidate']['p50_ms'])} | ratio {p50} | - |")
    err = report.get("errors")
    if err:
        rows.append(
            f"| failed requests | {err['live_failed']} of {err['live_requests']} | {err['failed']} of {err['requests']} "
            f"| rate <= {report['bounds']['max_error_rate']:g} | {_result(checks, 'errors')} |"
        )
    m = report.get("metrics") or {}
    if m.get("available"):
        rows.append(f"| Triton /metrics | {_metrics_cell(m.get('live'))} | {_metrics_cell(m.get('candidate'))} | - | - |")
    prod = (err or {}).get("production")
    if prod:
        rows.append(
            f"| production on '{report['model']}' v{report['live']} | {prod['answered_during_canary']} answered, {prod['failed_during_canary']} failed "
            f"({_metrics_cell(m.get('production')) if m.get('available') else 'no /metrics'}) | - | - | - |"
        )
    v = report.get("verdict") or {}
    tail = f"verdict: {report['status'].upper()}" + (f": {v['summary']}" if v.get("summary") else "")
    return "\n".join([head, "", *rows, "", tail]) + "\n"


def _estimate_text(d: dict[str, Any]) -> str:
    from pipeline.stats.estimate import Estimate

    return Estimate.from_json(d).text()


def _result(checks: dict[str, dict[str, Any]], name: str) -> str:
    c = checks.get(name)
    return "-" if c is None else ("PASS" if c["passed"] else "FAIL")


def _metrics_cell(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    return f"{row['success']} ok, {row['failure']} failed; request {_ms(row['request_ms'])}, queue {_ms(row['queue_ms'])}, compute {_ms(row['compute_infer_ms'])}"


# ---------------------------------------------------------------- the record in the store
def record_dir(env: str, model: str) -> str:
    return f"history/{env}/{model}.canary"


def write_record(fs: StoreFS, report: dict[str, Any]) -> str:
    """Write (or rewrite) the canary's JSON, and its markdown table once it has a verdict; returns the JSON's path."""
    rel = f"{record_dir(report['env'], report['model'])}/{report['id']}"
    fs.write_atomic(f"{rel}.json", (json.dumps(report, indent=2, default=str) + "\n").encode())
    if report.get("checks") or report["status"] not in ("running",):
        fs.write_atomic(f"{rel}.md", markdown(report).encode())
    return f"{rel}.json"


def read_record(fs: StoreFS, env: str, model: str, rid: str | None = None) -> dict[str, Any] | None:
    """The record ``rid``, or the newest one (ids sort by time); None when there is none."""
    d = record_dir(env, model)
    if rid is None:
        ids = sorted(n.removesuffix(".json") for n in fs.listdir(d) if n.endswith(".json"))
        if not ids:
            return None
        rid = ids[-1]
    try:
        return json.loads(fs.read_bytes(f"{d}/{rid}.json"))
    except (OSError, ValueError):
        return None


def summary_line(report: dict[str, Any]) -> str:
    """One line for ``release list``: when, which versions, the outcome and why."""
    v = report.get("verdict") or {}
    why = v.get("summary") or report.get("note") or ""
    return (
        f"last canary {report.get('started_at', '?')[:16].replace('T', ' ')}: v{report['candidate']} against live v{report['live']}, "
        f"{report['status'].upper()}{': ' + why if why else ''}"
    )
