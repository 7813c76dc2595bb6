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

from pipeline.core.config import ToleranceConfig
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.parity import polygraphy as pg
from pipeline.parity.report import fmt, output_failures, polygraphy_options, resolve, summarize_output, tolerance_key
from pipeline.records.canary import Agreement, CanaryRecord, Check, ErrorCounts, MetricsRow
from pipeline.release.canary.traffic import Latency, OutputPairs
from pipeline.release.store import canaries
from pipeline.release.store.fs import StoreFS


def agreement(pairs: OutputPairs, tol: ToleranceConfig, kind: str, live: str, candidate: str) -> Agreement:
    """The candidate's outputs against the live version's, output by output, with the parity stage's statistics.

    ``kind`` is the parity tolerance section used (``fp32``, ``fp16``, ``trt``): its failure lines name
    ``parity.<kind>.per_output.<output>.atol``.
    """
    from polygraphy.comparator import IterationResult, RunResults

    tolerance = f"parity.{kind}"
    if not pairs.live:
        return Agreement(tolerance, pairs.answered, 0, False, {}, ["no row was answered by both versions"])
    ref = RunResults([(live, [IterationResult(o, runner_name=live) for o in pairs.live])])
    art = RunResults([(candidate, [IterationResult(o, runner_name=candidate) for o in pairs.candidate])])
    opts = polygraphy_options(tol, pairs.names)
    with pg.quiet():
        per_pair = pg.compare(ref, art, pg.compare_func(opts["atol"], opts["rtol"], opts["stat"], opts["quantile"]))
    outputs = {n: summarize_output(n, resolve(tol, n), [m.get(n) for m in per_pair], [a.get(n) for a in pairs.candidate], [r[n] for r in pairs.live]) for n in pairs.names}
    ok = all(o.passed for o in outputs.values())
    return Agreement(tolerance, pairs.answered, len(pairs.live), ok, {n: o.to_json() for n, o in outputs.items()}, output_failures(kind, tolerance_key(kind), outputs))


def error_rate(counts: dict[str, int], client_errors: int, sent: int) -> tuple[float | None, int, int]:
    """The candidate's failed share: Triton's count (success + fail during the canary), or the client's if larger."""
    served = counts.get("success", 0) + counts.get("fail", 0)
    server = counts.get("fail", 0) / served if served else None
    client = client_errors / sent if sent else None
    rates = [r for r in (server, client) if r is not None]
    return (max(rates) if rates else None), max(counts.get("fail", 0), client_errors), max(served, sent)


def verdict(agree: Agreement, latency: Latency | None, errors: ErrorCounts, cfg: CanaryConfig) -> list[Check]:
    """The three checks against ``release.canary``'s bounds."""
    checks = [Check("outputs", agree.passed, "; ".join(agree.problems) or f"{agree.distinct} distinct answers of {agree.answered} rows within {agree.tolerance}")]
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
    rate = errors.rate
    if rate is None:
        checks.append(Check("errors", False, "the candidate answered no request"))
    else:
        ok = rate <= cfg.max_error_rate
        checks.append(
            Check(
                "errors",
                ok,
                f"{errors.failed} of {errors.requests} candidate requests failed ({rate:.2%}) {'<=' if ok else '>'} {cfg.max_error_rate:.2%} (release.canary.max_error_rate)",
            )
        )
    return checks


# ---------------------------------------------------------------- rendering
def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g} ms"


def markdown(rec: CanaryRecord) -> str:
    """The short table: one row per check, the live and candidate numbers side by side, the bound, the result."""
    live, cand = f"live v{rec.live} (baseline copy)", f"candidate v{rec.candidate}"
    t = rec.traffic
    head = (
        f"canary of {rec.model} v{rec.candidate} against live v{rec.live} in '{rec.env}' on {rec.server}: "
        f"{t.kind} traffic, {t.duration_s:g} s{(', share %g' % t.share) if t.kind == 'real' else ''}, {rec.started_at}"
    )
    rows = [f"| check | {live} | {cand} | bound | result |", "|---|---|---|---|---|"]
    checks = {c.name: c for c in rec.checks or []}
    agree = rec.outputs or Agreement("", 0, 0, False, {}, [])
    for name, o in agree.outputs.items():
        rows.append(
            f"| outputs: {name} | reference | max abs {fmt(o['max_abs'])}, mean abs {fmt(o['mean_abs'])}, {o['failed_samples']}/{o['samples']} differ "
            f"| {agree.tolerance}: atol {fmt(o['atol'])}, rtol {fmt(o['rtol'])}, {o['stat']} | {_result(checks, 'outputs')} |"
        )
    lat = rec.latency
    if lat:
        p99, p50 = _estimate_text(lat.p99_ratio), _estimate_text(lat.p50_ratio)
        rows.append(f"| p99 latency | {_ms(lat.live.p99_ms)} | {_ms(lat.candidate.p99_ms)} | ratio {p99} <= {rec.bounds.max_p99_ratio:g} | {_result(checks, 'latency')} |")
        rows.append(f"| p50 latency | {_ms(lat.live.p50_ms)} | {_ms(lat.candidate.p50_ms)} | ratio {p50} | - |")
    err = rec.errors
    if err:
        rows.append(
            f"| failed requests | {err.live_failed} of {err.live_requests} | {err.failed} of {err.requests} | rate <= {rec.bounds.max_error_rate:g} | {_result(checks, 'errors')} |"
        )
    m = rec.metrics
    if m and m.available:
        rows.append(f"| Triton /metrics | {_metrics_cell(m.sides.get('live'))} | {_metrics_cell(m.sides.get('candidate'))} | - | - |")
    if err:
        prod = err.production
        rows.append(
            f"| production on '{rec.model}' v{rec.live} | {prod.answered_during_canary} answered, {prod.failed_during_canary} failed "
            f"({_metrics_cell(m.sides.get('production')) if m and m.available else 'no /metrics'}) | - | - | - |"
        )
    summary = rec.verdict.summary if rec.verdict else ""
    tail = f"verdict: {rec.status.upper()}" + (f": {summary}" if summary else "")
    return "\n".join([head, "", *rows, "", tail]) + "\n"


def _estimate_text(d: dict[str, object]) -> str:
    from pipeline.stats.estimate import Estimate

    return Estimate.from_json(d).text()


def _result(checks: dict[str, Check], name: str) -> str:
    c = checks.get(name)
    return "-" if c is None else ("PASS" if c.passed else "FAIL")


def _metrics_cell(row: MetricsRow | None) -> str:
    if not row:
        return "-"
    return f"{row.success} ok, {row.failure} failed; request {_ms(row.request_ms)}, queue {_ms(row.queue_ms)}, compute {_ms(row.compute_infer_ms)}"


# ---------------------------------------------------------------- the record in the store
def write_record(fs: StoreFS, rec: CanaryRecord) -> str:
    """Write (or rewrite) the canary's JSON, and its markdown table once it has checks or is over; returns the JSON's path."""
    return canaries.write(fs, rec, markdown(rec) if rec.checks or rec.status != "running" else None)
