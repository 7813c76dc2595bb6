"""Parity bookkeeping without any runtime: tolerances per output, the report, the gate, the lookup.

The comparison itself is Polygraphy's (pipeline/parity/polygraphy.py); this module turns
its per-sample results into the parity.json report (read by ``dvc metrics``), raises the one
ParityError that lists every failing output, and answers "did artifact X pass?" for the stages
that ship artifacts (:func:`artifact_passed`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.config import ErrorStat, ToleranceConfig
from pipeline.core.atomic import read_json
from pipeline.core.errors import ParityError
from pipeline.core.quality import round_down

SCHEMA_VERSION = 1
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
) -> dict[str, Any]:
    """Report entry for one output over all samples: statistics, verdict, the tolerance that would pass.

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
    passed = not problems and not failed_samples
    return {
        "passed": passed,
        "max_abs": _num(worst("max_absdiff")),
        "max_rel": _num(worst("max_reldiff")),
        "mean_abs": _num(mean_abs),
        "stat": stat,
        "stat_abs": _num(worst(f"{key}_absdiff")),
        "stat_rel": _num(worst(f"{key}_reldiff")),
        "atol": tol["atol"],
        "rtol": tol["rtol"],
        **({"quantile": tol["quantile"]} if stat == "quantile" else {}),
        "min_passing_atol": None if problems else _num(_min_passing_atol(stat, tol["rtol"], [r for r, _, _ in ok], [a for _, a, _ in ok], [b for _, _, b in ok])),
        "samples": len(results),
        "failed_samples": len(failed_samples),
        "nonfinite": nonfinite,
        **({"problems": problems} if problems else {}),
    }


def quality_failures(kind: str, out: str, o: dict[str, Any], section: str) -> list[str]:
    """One line per quality metric below its threshold, with the threshold that would pass (rounded down)."""
    q = o.get("quality") or {}
    lines = []
    for metric, f in (q.get("failed") or {}).items():
        value, key = f.get("value"), f"{section}.quality.{metric}"
        if value is None:
            lines.append(
                f"{kind}/{out}: {q.get('kind')} {metric} could not be computed (NaN/Inf outputs, or fewer than 3 rows); {key}={f['threshold']:g} needs it (null skips the check)"
            )
        else:
            lines.append(f"{kind}/{out}: {q.get('kind')} {metric}={value:.4f} < {key}={f['threshold']:g}; passes with {key}={round_down(value)}")
    return lines


def coverage_reasons(o: dict[str, Any], blocking: bool = True) -> list[str]:
    """Why the reference rows cannot judge this output's verdict (``blocking=False``: every reason, also those that void
    no threshold set, e.g. one class where top-1 agreement is not checked); empty: they can."""
    cov = (o.get("quality") or {}).get("coverage") or o.get("coverage") or {}
    return list(cov.get("blocking" if blocking else "reasons") or [])


def coverage_failures(kind: str, out: str, o: dict[str, Any]) -> list[str]:
    """One line per reason the reference cannot judge ``out``: a pass there would not be a pass."""
    return [
        f"{kind}/{out}: cannot judge, {r}; not a pass: supply real, varied inputs with model.data (rows that cover the classes and move the outputs)" for r in coverage_reasons(o)
    ]


def failures(report: dict[str, Any], kinds: set[str] | None = None) -> list[str]:
    """One line per failing output and quality metric (or artifact that could not run), with numbers and the key to
    change; ``kinds`` limits it to those artifacts."""
    lines: list[str] = []
    for kind, art in report.get("artifacts", {}).items():
        if kinds is not None and kind not in kinds:
            continue
        if art.get("status") == "error":
            lines.append(f"{kind}: could not run: {art.get('reason')}")
            continue
        section = art.get("config_key") or tolerance_key(kind)
        lines += [
            f"{kind}: I/O contract broken: {p} (no tolerance fixes this; the artifact must take and return what the reference does)"
            for p in (art.get("contract") or {}).get("problems", [])
        ]
        for out, o in art.get("outputs", {}).items():
            if o.get("passed"):
                continue
            lines += quality_failures(kind, out, o, section)
            lines += coverage_failures(kind, out, o)
            # Only quality failed? (An entry without the split, e.g. a canary's, failed elementwise.)
            if o.get("elementwise_passed", bool((o.get("quality") or {}).get("failed"))):
                continue
            key = f"{section}.per_output.{out}"
            if o.get("problems"):
                lines.append(f"{kind}/{out}: {'; '.join(o['problems'])} (no tolerance fixes this)")
                continue
            need = o.get("min_passing_atol")
            lines.append(
                f"{kind}/{out}: {o['stat']} error abs={fmt(o['stat_abs'])} > atol={fmt(o['atol'])} and "
                f"rel={fmt(o['stat_rel'])} > rtol={fmt(o['rtol'])} in {o['failed_samples']}/{o['samples']} samples "
                f"(max_abs={fmt(o['max_abs'])}, mean_abs={fmt(o['mean_abs'])}); "
                f"passes with {key}.atol={fmt(round_up(need))}"
                if need is not None
                else f"{kind}/{out}: non-finite error; see the report"
            )
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


def gating(report: dict[str, Any]) -> set[str] | None:
    """The artifact kinds whose failure fails the stage (None: every one, for reports that do not say)."""
    kinds = report.get("gating")
    return None if kinds is None else set(kinds)


def gate(report: dict[str, Any], report_path: Path | str) -> None:
    """Raise one ParityError listing every failing output and metric of the gating artifacts; return quietly when they pass.

    A candidate no target is configured to serve (int8 under precision auto) is judged and reported, but does not fail
    the stage: the choose stage only picks candidates that passed.
    """
    lines = failures(report, gating(report))
    if not lines:
        return
    raise ParityError(
        f"parity failed for {len(lines)} output(s) or metric(s) against the reference ({report.get('reference', {}).get('source')}, "
        f"{report.get('reference', {}).get('samples')} samples)",
        fix="if the differences are acceptable, set the named key (`dvc exp run -S '<key>=<value>'`; a per_output key takes a "
        "leading '+', e.g. '+parity.fp16.per_output.<output>.atol=<value>'); otherwise fix the artifact "
        "(fp16: precision.node_block_list / op_block_list; int8: int8.nodes_to_exclude, int8.fallback, int8.calibration.method)",
        details={**{f"[{i + 1}]": ln for i, ln in enumerate(lines)}, "report": report_path},
    )


def artifact_passed(report: dict[str, Any], kind: str) -> tuple[bool, str]:
    """Whether ``kind`` ("fp32", "fp16", "trt@<target>"; "trt:<target>" is accepted) passed parity, and why not.

    Missing, skipped, errored or failed all count as not passed: a stage that ships an artifact
    must refuse unless this returns True.
    """
    kind = kind.replace(":", "@")
    art = report.get("artifacts", {}).get(kind)
    if art is None:
        return False, f"'{kind}' is not in the parity report (kinds there: {sorted(report.get('artifacts', {}))})"
    status = art.get("status")
    if status == "passed" and art.get("passed") is True:
        return True, "passed"
    if status in ("skipped", "error"):
        return False, f"parity {status}: {art.get('reason')}"
    if status == "inconclusive":
        why = [r for v in art.get("outputs", {}).values() for r in coverage_reasons(v)]
        return False, f"parity inconclusive: the reference rows cannot judge it ({'; '.join(why)})"
    if not (art.get("contract") or {}).get("passed", True):
        return False, f"parity failed: I/O contract broken ({'; '.join((art.get('contract') or {}).get('problems') or ['see outputs'])})"
    bad = [o for o, v in art.get("outputs", {}).items() if not v.get("passed")]
    return False, f"parity failed for outputs {bad}"


def load_report(path: Path | str) -> dict[str, Any]:
    """Read a parity.json; raise ParityError if missing or unreadable."""
    p = Path(path)
    data = read_json(p, ParityError, "parity report", "run the parity stage first (dvc repro parity)")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
        raise ParityError(f"parity report {p} has an unknown format", details={"schema": data.get("schema") if isinstance(data, dict) else None}, fix="rerun the parity stage")
    return data
