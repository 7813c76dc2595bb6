"""Parity bookkeeping without any runtime: tolerances per output, each output's entry, the failure lines, the gate.

The comparison itself is Polygraphy's (pipeline/parity/polygraphy.py); this module turns
its per-sample results into the entries of the parity report (pipeline/records/parity.py, which
also answers "did artifact X pass?" for the stages that ship artifacts) and raises the one
ParityError that lists every failing output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.config import ErrorStat, ToleranceConfig
from pipeline.core.errors import ParityError
from pipeline.core.quality import round_down
from pipeline.records.parity import ArtifactResult, OutputResult, ParityReport

# Polygraphy adds this to zero reference values before dividing (SimpleCompareFunc); we match it.
_EPS = 2.220446049250313e-16


def tolerance_key(kind: str) -> str:
    """Config section of an artifact kind: 'fp16' -> 'parity.fp16', 'trt@a100' -> 'parity.trt'."""
    return "parity." + kind.replace(":", "@").split("@", 1)[0]


def resolve(tol: ToleranceConfig, output: str) -> dict[str, Any]:
    """Effective atol, rtol, stat and quantile for one output (per_output overrides the kind's values)."""
    o = tol.per_output.get(output)
    stat = o.check_error_stat if o and o.check_error_stat is not None else tol.check_error_stat
    return {
        "atol": float(o.atol if o and o.atol is not None else tol.atol),
        "rtol": float(o.rtol if o and o.rtol is not None else tol.rtol),
        "stat": stat.value if isinstance(stat, ErrorStat) else str(stat),
        "quantile": float(o.error_quantile if o and o.error_quantile is not None else tol.error_quantile),
    }


def polygraphy_options(tol: ToleranceConfig, outputs: list[str]) -> dict[str, dict[str, Any]]:
    """Per-output dicts for SimpleCompareFunc ("" is the default for outputs not listed)."""
    base = resolve(tol, "")
    opts: dict[str, dict[str, Any]] = {k: {"": v} for k, v in base.items()}
    for name in outputs:
        for k, v in resolve(tol, name).items():
            opts[k][name] = v
    return opts


def _num(x: float | None) -> float | None:
    """JSON-safe float: NaN/Inf become null (JSON has no NaN; dvc metrics would choke)."""
    return None if x is None or not math.isfinite(x) else float(x)


def _min_passing_atol(stat: str, rtol: float, results: list[Any], art: list[np.ndarray], ref: list[np.ndarray]) -> float | None:
    """Smallest atol that passes every sample at the configured rtol (None if no atol can: NaN/Inf)."""
    need = 0.0
    for r, a, b in zip(results, art, ref):
        if stat == "elemwise":
            # Per element Polygraphy fails where abs > atol AND rel > rtol: atol must cover the rel-failing ones.
            absdiff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            denom = np.abs(b.astype(np.float64))
            denom[denom == 0] = _EPS
            rel_fail = ~(absdiff / denom <= rtol)
            if not np.isfinite(absdiff).all():
                return None
            if rel_fail.any():
                need = max(need, float(absdiff[rel_fail].max()))
        else:
            a_stat, r_stat = getattr(r, f"{stat}_absdiff"), getattr(r, f"{stat}_reldiff")
            if a_stat is None or not math.isfinite(a_stat):
                return None
            if r_stat is None or not r_stat <= rtol:
                need = max(need, float(a_stat))
    return need


def summarize_output(
    name: str,
    tol: dict[str, Any],
    results: list[Any],
    art: list[np.ndarray | None],
    ref: list[np.ndarray],
) -> OutputResult:
    """The entry of one output over all samples: statistics, verdict, the tolerance that would pass.

    ``results`` holds Polygraphy's per-sample OutputCompareResult (or False for a shape mismatch,
    None when the artifact lacks the output).
    """
    problems: list[str] = []
    missing = [i for i, a in enumerate(art) if a is None]
    if missing:
        problems.append(f"output missing in samples {missing}")
    shape_bad = [i for i, r in enumerate(results) if r is False]
    if shape_bad:
        problems.append(f"shape differs from the reference in samples {shape_bad}")
    nonfinite = int(sum(int((~np.isfinite(a)).sum()) for a in art if a is not None and np.issubdtype(a.dtype, np.floating)))
    if nonfinite:
        problems.append(f"{nonfinite} NaN/Inf values")
    ok = [(r, a, b) for r, a, b in zip(results, art, ref) if r is not None and r is not False and a is not None]
    failed_samples = [i for i, r in enumerate(results) if r is None or r is False or not bool(r)]
    stat = tol["stat"]
    key = "max" if stat == "elemwise" else stat

    def worst(field: str) -> float | None:
        vals = [getattr(r, field) for r, _, _ in ok if getattr(r, field) is not None]
        if any(not math.isfinite(v) for v in vals):
            return math.nan
        return max(vals) if vals else None

    sizes = [a.size for _, a, _ in ok]
    mean_abs = (sum(r.mean_absdiff * n for (r, _, _), n in zip(ok, sizes)) / sum(sizes)) if ok and sum(sizes) else None
    return OutputResult(
        passed=not problems and not failed_samples,
        max_abs=_num(worst("max_absdiff")),
        max_rel=_num(worst("max_reldiff")),
        mean_abs=_num(mean_abs),
        stat=stat,
        stat_abs=_num(worst(f"{key}_absdiff")),
        stat_rel=_num(worst(f"{key}_reldiff")),
        atol=tol["atol"],
        rtol=tol["rtol"],
        quantile=tol["quantile"] if stat == "quantile" else None,
        min_passing_atol=None if problems else _num(_min_passing_atol(stat, tol["rtol"], [r for r, _, _ in ok], [a for _, a, _ in ok], [b for _, _, b in ok])),
        samples=len(results),
        failed_samples=len(failed_samples),
        nonfinite=nonfinite,
        problems=problems,
    )


def quality_failures(kind: str, out: str, o: OutputResult, section: str) -> list[str]:
    """One line per quality metric below its threshold, with the threshold that would pass (rounded down)."""
    q = o.quality
    if q is None:
        return []
    lines: list[str] = []
    for metric, f in q.failed.items():
        key = f"{section}.quality.{metric}"
        if f.value is None:
            lines.append(f"{kind}/{out}: {q.kind} {metric} could not be computed (NaN/Inf outputs, or fewer than 3 rows); {key}={f.threshold:g} needs it (null skips the check)")
        else:
            lines.append(f"{kind}/{out}: {q.kind} {metric}={f.value:.4f} < {key}={f.threshold:g}; passes with {key}={round_down(f.value)}")
    return lines


def coverage_failures(kind: str, out: str, o: OutputResult) -> list[str]:
    """One line per reason the reference cannot judge ``out``: a pass there would not be a pass."""
    return [
        f"{kind}/{out}: cannot judge, {r}; not a pass: supply real, varied inputs with model.data (rows that cover the classes and move the outputs)" for r in o.coverage_reasons()
    ]


def output_failures(kind: str, section: str, outputs: Mapping[str, OutputResult]) -> list[str]:
    """One line per failing output and quality metric of one artifact, with numbers and the key (under ``section``,
    e.g. ``parity.fp16``) to change."""
    lines: list[str] = []
    for out, o in outputs.items():
        if o.passed:
            continue
        lines += quality_failures(kind, out, o, section)
        lines += coverage_failures(kind, out, o)
        # Only quality failed? (An entry without the split, e.g. a canary's, failed elementwise.)
        elementwise_passed = o.elementwise_passed if o.elementwise_passed is not None else bool(o.quality and o.quality.failed)
        if elementwise_passed:
            continue
        if o.problems:
            lines.append(f"{kind}/{out}: {'; '.join(o.problems)} (no tolerance fixes this)")
            continue
        lines.append(_elementwise_line(kind, out, o, f"{section}.per_output.{out}"))
    return lines


def _elementwise_line(kind: str, out: str, o: OutputResult, key: str) -> str:
    need = o.min_passing_atol
    if need is None:
        return f"{kind}/{out}: non-finite error; see the report"
    return (
        f"{kind}/{out}: {o.stat} error abs={fmt(o.stat_abs)} > atol={fmt(o.atol)} and "
        f"rel={fmt(o.stat_rel)} > rtol={fmt(o.rtol)} in {o.failed_samples}/{o.samples} samples "
        f"(max_abs={fmt(o.max_abs)}, mean_abs={fmt(o.mean_abs)}); "
        f"passes with {key}.atol={fmt(round_up(need))}"
    )


def failures(artifacts: Mapping[str, ArtifactResult], kinds: set[str] | None = None) -> list[str]:
    """One line per failing output and quality metric (or artifact that could not run), with numbers and the key to
    change; ``kinds`` limits it to those artifacts."""
    lines: list[str] = []
    for kind, art in artifacts.items():
        if kinds is not None and kind not in kinds:
            continue
        if art.status == "error":
            lines.append(f"{kind}: could not run: {art.reason}")
            continue
        lines += [
            f"{kind}: I/O contract broken: {p} (no tolerance fixes this; the artifact must take and return what the reference does)"
            for p in (art.contract.problems if art.contract else [])
        ]
        lines += output_failures(kind, art.config_key or tolerance_key(kind), art.outputs or {})
    return lines


def fmt(x: float | None) -> str:
    """A statistic with 3 significant digits, or n/a."""
    return "n/a" if x is None else f"{x:.3g}"


def round_up(x: float, digits: int = 3) -> float:
    """``x`` rounded *up* to ``digits`` significant digits, so a printed tolerance still covers ``x``.

    Rounding to nearest can print 2.98e-07 for a needed 2.9802e-07, and that suggestion then fails.
    """
    if x <= 0 or not math.isfinite(x):
        return x
    exp = math.floor(math.log10(x)) - digits + 1
    up = math.ceil(x / 10.0**exp) * 10.0**exp
    # The decimal string is what the user pastes: make sure it parses back to at least x.
    text = float(f"{up:.{digits}g}")
    return text if text >= x else float(f"{up + 10.0**exp:.{digits}g}")


def gate(report: ParityReport, report_path: Path | str) -> None:
    """Raise one ParityError listing every failing output and metric of the gating artifacts; return quietly when they pass.

    A candidate no target is configured to serve (int8 under precision auto) is judged and reported, but does not fail
    the stage: the choose stage only picks candidates that passed.
    """
    lines = failures(report.artifacts, report.gating_kinds())
    text = report.text_endpoint
    if text is not None and not text.passed and not lines:
        raise ParityError(
            f"parity failed for the text endpoint: {text.reason}",
            fix="serve a model that masks its padding, fix model.tokenizer (inputs, max_length), or set model.tokenizer=null to ship no text endpoint",
            details={"tokenizer sha256": text.tokenizer_sha256, "rows": text.rows, "report": report_path},
        )
    if text is not None and not text.passed:
        lines.append(f"text endpoint: {text.reason}")
    if not lines:
        return
    ref = report.reference
    raise ParityError(
        f"parity failed for {len(lines)} output(s) or metric(s) against the reference ({ref.source if ref else None}, {ref.samples if ref else None} samples)",
        fix="if the differences are acceptable, set the named key (`dvc exp run -S '<key>=<value>'`; a per_output key takes a "
        "leading '+', e.g. '+parity.fp16.per_output.<output>.atol=<value>'); otherwise fix the artifact "
        "(fp16: precision.node_block_list / op_block_list; int8: int8.nodes_to_exclude, int8.fallback, int8.calibration.method)",
        details={**{f"[{i + 1}]": ln for i, ln in enumerate(lines)}, "report": report_path},
    )
