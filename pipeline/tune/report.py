"""The tune record as a markdown report, a console line and dvc metrics (rendering only: no rule lives here)."""

from __future__ import annotations

from typing import Any

from pipeline.records.tune import Comparison, TuneRecord


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "n/a" if v is None else f"{v:{fmt}}"


def _comparison(c: Comparison) -> str:
    return (
        f"{c.a} over {c.b}: {c.ratio.text()} in infer/s; {c.a} {_num(c.a_infer_s)} infer/s, p99 {_num(c.a_p99_ms, '.2f')} ms;"
        f" {c.b} {_num(c.b_infer_s)} infer/s, p99 {_num(c.b_p99_ms, '.2f')} ms"
    )


def markdown(r: TuneRecord) -> str:
    """Every candidate with its interval, the winner, and the winner against the runner-up, the start and MA."""
    lines = [
        "# Tune: the throughput variant's scheduling",
        "",
        f"- Outcome: **{r.source}**: {r.reason}",
        f"- Ships: `{r.winner.label()}` (configured: `{r.start.label()}`)",
        f"- Objective {r.objective} at concurrency {r.concurrency}, constraint p99 <= {r.p99_bound_ms:g} ms; {r.precision} file {r.onnx}",
    ]
    if not r.enabled:
        return "\n".join(lines) + "\n"
    steps, cut = len({t.step for t in r.trials}), " (partial)" if r.partial else ""
    lines += [f"- Search: {r.wall_s:g} s of a {r.budget_s:g} s budget{cut}, {len(r.trials)} candidate rows in {steps} steps, on {r.cores} cores"]
    lines += [f"- Best p99 seen: {_num(r.best_p99_ms, '.2f')} ms"]
    for title, c in (
        ("Winner against the configured variant", r.vs_start),
        ("Winner against the runner-up", r.runner_up),
        ("Winner against Model Analyzer's best", r.vs_model_analyzer),
    ):
        if c is not None:
            lines += [f"- {title}: {_comparison(c)}"]
    ma = r.model_analyzer
    if ma is not None:
        lines += ["", "## Model Analyzer", ""]
        if ma.ran:
            lines += [
                f"Searched {ma.measured} configurations in {ma.wall_s:g} s; its best `{ma.config_name}` = `{ma.knobs.label() if ma.knobs else 'n/a'}`"
                f" (its own numbers: {_num(ma.reported_infer_s)} infer/s, p99 {_num(ma.reported_p99_ms, '.2f')} ms)."
            ]
        else:
            lines += [f"Not run: {ma.error}"]
    lines += ["", "## Candidates", "", "Each step moves one knob; ratios are the candidate's objective over the step's incumbent in the same rounds.", ""]
    lines += ['The step\'s best is then measured against the incumbent in fresh rounds ("confirmed"), which alone decide.', ""]
    lines += ["| step | knob | candidate | vs incumbent | confirmed | infer/s | p99 ms | rounds | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for t in r.trials:
        confirmed = t.confirmed.text() if t.confirmed else ""
        lines.append(
            f"| {t.step} | {t.knob} | `{t.knobs.label()}` | {t.vs_incumbent.text()} | {confirmed} | {_num(t.infer_s)} | {_num(t.p99_ms, '.2f')} | {t.rounds} | {t.verdict} |"
        )
    lines += ["", "To write the winner into the YAML instead: " + " ".join(f"-S '{o}'" for o in r.winner.overrides())]
    lines += [""] + [f"- note: {n}" for n in r.notes]
    return "\n".join(lines).rstrip() + "\n"


def headline(r: TuneRecord) -> dict[str, Any]:
    """A handful of numbers for `dvc metrics` and `dvc exp show` (one column while the tune is off): where the throughput
    variant came from and, when measured, what it gained with its 90% interval. The winner's values are in tune.json."""
    if not r.enabled:
        return {"source": r.source}
    out: dict[str, Any] = {"source": r.source, "partial": r.partial, "wall_s": r.wall_s}
    for name, c in (("vs_start", r.vs_start), ("vs_model_analyzer", r.vs_model_analyzer)):
        if c is not None:
            out |= {name: c.ratio.value, f"{name}_ci90_low": c.ratio.low, f"{name}_ci90_high": c.ratio.high}
    if r.model_analyzer is not None:
        out["model_analyzer_wall_s"] = r.model_analyzer.wall_s
    return out


def console(r: TuneRecord) -> str:
    """What the stage prints last."""
    line = f"[tune] {r.source}: ships {r.winner.label()} ({r.reason})"
    if r.vs_start is not None:
        line += f"\n[tune] {_comparison(r.vs_start)}"
    if r.vs_model_analyzer is not None:
        line += f"\n[tune] {_comparison(r.vs_model_analyzer)}"
    if r.model_analyzer is not None and not r.model_analyzer.ran:
        line += f"\n[tune] Model Analyzer not run: {r.model_analyzer.error}"
    return line
