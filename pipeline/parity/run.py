"""parity stage: the reference model against every artifact on real inputs, with Polygraphy; a hard gate.

Reference: the original PyTorch model on the CPU (model.source=factory) or the exported copy of the
given ONNX file (model.source=onnx). Artifacts: the simplified FP32 ONNX and the FP16 ONNX under
ONNX Runtime, and each TensorRT engine under --engines where tensorrt imports (else recorded as
skipped, with the reason). Inputs and reference outputs are saved as Polygraphy JSON goldens;
``--goldens-only`` compares artifacts against saved goldens without torch (GPU CI, later runs).

    python -m pipeline.stages.parity --params params.yaml --source-onnx artifacts/onnx/model.onnx \\
        --fp32 artifacts/onnx/model.sim.onnx --fp16 artifacts/onnx/model.fp16.onnx \\
        --inputs artifacts/parity/inputs.json --reference artifacts/parity/reference.json \\
        --report artifacts/reports/parity.json [--engines artifacts/engines] [--goldens-only]
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pipeline.core import atomic, holdout, onnx_tools, optional, quality
from pipeline.parity import contract
from pipeline.parity import polygraphy as pg
from pipeline.parity.contract import Contract
from pipeline.core.config import PipelineConfig, TensorSpec, ToleranceConfig
from pipeline.core.errors import EngineError, ParityError
from pipeline.parity.report import fmt, polygraphy_options, resolve, round_up, summarize_output, tolerance_key
from pipeline.core.samples import input_specs, load_samples
from pipeline.core.specs import graph_io
from pipeline.engines.targets import gpu_targets
from pipeline.records.engine_manifest import MANIFEST_NAME, PLAN_NAME, read_manifest
from pipeline.records.parity import ArtifactResult, ContractCheck, OutputResult, ParityReport, Reference, TextParity
from pipeline.core.verdicts import Coverage, Quality

NOTES = [
    "ONNX artifacts run on ONNX Runtime's CPU provider, which computes most FP16 ops in FP32: the fp16 row "
    "checks the converted graph and weights, not FP16 arithmetic; FP16 range safety is decided in the fp16 "
    "stage from FP32 intermediate ranges (fp16.json: fallback). TensorRT rows run true FP16 on the GPU.",
    "max_rel follows Polygraphy (|diff| / |reference|): it is huge where the reference is ~0, which is why an output fails only when its statistic exceeds both atol and rtol.",
]


@dataclass(frozen=True)
class SampleChoice:
    """How the judged samples were chosen: the rule, their rows and digest, and (real samples) the rows left out."""

    split: str
    rows: int
    sha256: str
    rows_available: Optional[int] = None
    calibration_rows_left_out: Optional[int] = None


def judged_samples(cfg: PipelineConfig, specs: list[TensorSpec]) -> tuple[list[pg.Feed], SampleChoice]:
    """The samples every artifact is judged on, and how they were chosen: of real samples (model.data), the rows the
    split holds out of calibration (pipeline/core/holdout.py, the calibrate stage's very rule), so INT8 is judged on
    inputs neither its ranges nor its fallback have seen; synthetic samples as they are. At most parity.max_samples."""
    feeds = load_samples(cfg.model, specs, batch_sizes=list(cfg.parity.synthetic_batch_sizes))
    batched = holdout.batched(specs)
    split, available, left_out = "none: synthetic samples (model.data is null), the calibration set's too", None, None
    if cfg.model.data is not None:
        names = {s.name for s in specs}
        s = holdout.split([{k: v for k, v in f.items() if k in names} for f in feeds], cfg.int8.calibration.holdout, batched)
        feeds = s.holdout.feeds
        split = f"held out of calibration: int8.calibration.holdout={s.share} ({holdout.RULE})"
        available, left_out = s.calibration.rows + s.holdout.rows, s.calibration.rows
    feeds = feeds[: cfg.parity.max_samples]
    return feeds, SampleChoice(split, sum(holdout.rows_of(f) for f in feeds), holdout.digest(feeds, batched), available, left_out)


def reference_results(cfg: PipelineConfig, source_onnx: Path | None) -> tuple[list[pg.Feed], Any, str, SampleChoice]:
    """The judged samples and the reference's outputs on them: (feeds, RunResults, source name, how the samples were chosen)."""
    model = cfg.model
    if model.source == "onnx":
        if source_onnx is None:
            raise ParityError("model.source=onnx needs the exported copy of the ONNX file as reference", fix="pass --source-onnx artifacts/onnx/model.onnx")
        proto = onnx_tools.load_model(source_onnx, "reference ONNX (model.path copy)")
        specs = input_specs(model, graph_io(proto)[0])
        runner, source = pg.onnxrt_runner(source_onnx, "reference"), "onnx"
    else:
        from pipeline.convert.export import build_module  # the export stage's safe factory + checkpoint loader

        specs, source = model.inputs, "torch"
        runner = pg.TorchCpuRunner(lambda: build_module(model), specs, list(model.outputs), name="reference")
    feeds, chosen = judged_samples(cfg, specs)
    results = pg.run(runner, feeds, f"reference ({source})")
    for i, out in enumerate(pg.outputs(results)):
        if bad := onnx_tools.nonfinite(out):
            raise ParityError(
                f"the reference itself produces NaN/Inf on sample {i}",
                details={"outputs": bad},
                fix="check the model and the sample inputs (model.data); nothing can be compared against a non-finite reference",
            )
    return feeds, results, source, chosen


@dataclass(frozen=True)
class Judging:
    """What every artifact is held to beside its tolerances: each output's kind and class/embedding axis
    (model.output_kinds, model.output_axes), the reference's I/O contract as its ONNX declares it (None: not at hand,
    e.g. goldens alone) and as it ran, and whether FP16 artifacts may take and return FLOAT16 (keep_io_types false)."""

    kinds: Mapping[str, str]
    axes: Mapping[str, int]
    declared: Contract | None
    observed: Contract
    float16_io: bool = False

    @classmethod
    def of(cls, cfg: PipelineConfig, feeds: list[pg.Feed], reference: Any, source_onnx: Path | None) -> Judging:
        declared = None
        if source_onnx is not None and source_onnx.is_file():
            declared = Contract.of(*graph_io(onnx_tools.load_model(source_onnx, "reference ONNX")))
        return cls(dict(cfg.model.output_kinds), dict(cfg.model.output_axes), declared, Contract.observed(feeds, pg.outputs(reference)), not cfg.precision.keep_io_types)


@dataclass(frozen=True)
class Baseline:
    """What every artifact is compared with: the judged samples, the reference's results on them (Polygraphy
    RunResults) and how each output is judged."""

    feeds: list[pg.Feed]
    results: Any
    judging: Judging


@dataclass(frozen=True)
class Artifact:
    """One artifact to compare: its kind (fp32, fp16, int8, trt@<target>), a Polygraphy runner over its file, the
    tolerances it is held to and their config section (default: the kind's), its graph's declared I/O (None: not read,
    e.g. an engine) and its precision (fp16 may change FLOAT to FLOAT16 where keep_io_types is false; default: kind)."""

    kind: str
    runner: Any
    path: Path
    tol: ToleranceConfig
    config_key: str | None = None
    declared: Contract | None = None
    precision: str | None = None


def _judge_output(name: str, o: OutputResult, ref: list[np.ndarray], art: list[np.ndarray], judging: Judging, tol: ToleranceConfig) -> OutputResult:
    """``o`` with the quality verdict (a judged output) or the coverage (any other float output) and its verdict updated."""
    kind, axis = judging.kinds.get(name), int(judging.axes.get(name, -1))
    if o.problems or not ref or np.asarray(ref[0]).dtype.kind != "f":  # nothing to measure on a broken or non-float output
        return o
    try:
        coverage = quality.degeneracy(ref, art, kind, axis)
        metrics = quality.measure(kind, ref, art, axis) if kind is not None else None
    except ValueError as e:
        raise ParityError(
            f"output '{name}' cannot be judged along axis {axis}: {e}",
            details={"shape": np.shape(ref[0])},
            fix=f"set model.output_axes.{name} to its class or embedding axis ('+model.output_axes.{name}=<axis>')",
        ) from None
    if kind is None or metrics is None:
        blocking = coverage.blocking()
        judged = Coverage.from_json({**coverage.to_json(), "judgeable": not blocking, "blocking": blocking})
        return replace(o, coverage=judged, passed=o.passed and not blocking)
    verdict = quality.judge(kind, metrics, tol.quality, coverage)
    return replace(o, quality=Quality.from_json(verdict.to_json()), passed=o.passed and verdict.passed)


def compare_artifact(art: Artifact, base: Baseline) -> ArtifactResult:
    """Run one artifact over the samples and summarize it against the reference, output by output.

    The artifact must keep the reference's I/O contract (its graph's declared one, and what it returned). An output
    named in ``judging.kinds`` is also judged by its quality metrics (pipeline/core/quality.py) against
    ``tol.quality``; it passes only when its elementwise check, its quality and the reference's coverage all pass.
    """
    # The sha256 of what was compared: the repository stage and `release build` ship a file only if its
    # sha256 is here, so a report from another run can never vouch for it.
    entry = ArtifactResult(status="error", file=str(art.path), sha256=atomic.file_digest(art.path)[0], config_key=art.config_key or tolerance_key(art.kind))
    float16_io = base.judging.float16_io and (art.precision or art.kind) == "fp16"
    try:
        results = pg.run(art.runner, _promised_feeds(base.feeds, art.declared) if float16_io else base.feeds, f"{art.kind} artifact {art.path}")
    except ParityError as e:  # an artifact that cannot run fails the gate; the others are still compared
        return replace(entry, passed=False, reason=e.what + "; " + "; ".join(f"{k}: {v}" for k, v in e.details.items()))
    art_out = pg.outputs(results)
    broken = _broken_contract(art, base, art_out, float16_io)
    outputs = _outputs(art.tol, base, results, art_out, broken)
    io_problems = [f"{k}: {p}" for k, ps in broken.items() if not k.startswith("output ") or k[7:] not in outputs for p in ps]
    ok = all(o.passed for o in outputs.values()) and not io_problems
    only_coverage = not ok and not io_problems and all(o.passed or (o.elementwise_passed and o.only_coverage()) for o in outputs.values())
    status = "passed" if ok else ("inconclusive" if only_coverage else "failed")
    return replace(entry, status=status, passed=ok, contract=ContractCheck(not broken, io_problems), outputs=outputs)


def _broken_contract(art: Artifact, base: Baseline, art_out: list[dict[str, np.ndarray]], float16_io: bool) -> dict[str, list[str]]:
    """``{"<side> <name>": [problem, ...]}``: where what the artifact returned, or its graph declares, breaks the reference's."""
    broken = contract.problems(base.judging.observed, Contract.observed(base.feeds, art_out), float16_io, "returned")
    if art.declared is not None and base.judging.declared is not None:
        for k, v in contract.problems(base.judging.declared, art.declared, float16_io).items():
            broken.setdefault(k, []).extend(v)
    return broken


def _outputs(tol: ToleranceConfig, base: Baseline, results: Any, art_out: list[dict[str, np.ndarray]], broken: Mapping[str, list[str]]) -> dict[str, OutputResult]:
    """Every reference output's entry: Polygraphy's comparison, the contract's problems, then quality or coverage."""
    ref_out = pg.outputs(base.results)
    names = list(ref_out[0])
    opts = polygraphy_options(tol, names)
    per_sample = pg.compare(base.results, results, pg.compare_func(opts["atol"], opts["rtol"], opts["stat"], opts["quantile"]))
    outputs: dict[str, OutputResult] = {}
    for n in names:
        o = summarize_output(n, resolve(tol, n), [m.get(n) for m in per_sample], [a.get(n) for a in art_out], [r[n] for r in ref_out])
        if broken.get(f"output {n}"):
            o = replace(o, problems=[*o.problems, *broken[f"output {n}"]], passed=False)
        o = replace(o, elementwise_passed=o.passed)
        if n in art_out[0]:
            o = _judge_output(n, o, [r[n] for r in ref_out], [a[n] for a in art_out], base.judging, tol)
        outputs[n] = o
    return outputs


def _promised_feeds(feeds: list[pg.Feed], declared: Contract | None) -> list[pg.Feed]:
    """The samples as an artifact whose FP32 inputs became FLOAT16 (precision.keep_io_types=false) takes them."""
    half = {k for k, (dtype, _) in (declared.inputs if declared else {}).items() if dtype == "float16"}
    return [{k: v.astype(np.float16) if k in half and v.dtype == np.float32 else v for k, v in f.items()} for f in feeds]


def engine_entries(engines: Path, targets: list[str], cfg: PipelineConfig, base: Baseline) -> dict[str, ArtifactResult]:
    """``trt@<target>`` entries for each GPU target's engine under ``engines`` (built, skipped, or not runnable here).

    Only ``targets`` are looked at (a stale directory of a target no longer in the fleet is not). An engine built from
    the INT8 ONNX is judged with parity.int8 (tolerances and quality), any other with parity.trt.
    Skipped entries carry no ``passed`` flag: they are neither a pass nor a failure of the gate.
    """
    out: dict[str, ArtifactResult] = {}
    for target in targets:
        manifest_path = engines / target / MANIFEST_NAME
        kind = f"trt@{target}"
        if not manifest_path.is_file():
            out[kind] = ArtifactResult(status="skipped", reason=f"no engine manifest at {manifest_path} (run `dvc repro engine@{target}`)")
            continue
        try:
            manifest = read_manifest(manifest_path)
        except EngineError as e:
            out[kind] = ArtifactResult(status="error", passed=False, reason=f"unreadable manifest {manifest_path}: {e.what}")
            continue
        plan = manifest_path.parent / (manifest.engine.file if manifest.engine else PLAN_NAME)
        if not manifest.built:
            out[kind] = ArtifactResult(status="skipped", file=str(plan), reason=f"engine not built: {manifest.reason}")
            continue
        runner, why = pg.trt_runner(plan, kind)
        if runner is None:
            out[kind] = ArtifactResult(status="skipped", file=str(plan), reason=why)
            continue
        section = "int8" if manifest.precision == "int8" else "trt"
        art = Artifact(kind, runner, plan, getattr(cfg.parity, section), f"parity.{section}", precision=str(manifest.precision))
        out[kind] = replace(compare_artifact(art, base), precision=manifest.precision)
    return out


def _torch_importable() -> bool:
    try:
        import torch  # noqa: F401 - only to learn whether the PyTorch reference can run here
    except ImportError:
        return False
    return True


def run_parity(
    cfg: PipelineConfig,
    artifacts: dict[str, Path],
    inputs_path: Path,
    reference_path: Path,
    source_onnx: Path | None = None,
    engines: Path | None = None,
    goldens_only: bool = False,
    verbose: bool = False,
) -> ParityReport:
    """Compare every artifact with the reference; save goldens unless ``goldens_only``; return the report.

    ``artifacts`` maps a kind ("fp32", "fp16") to its ONNX file. Does not raise on a parity
    failure (see :func:`pipeline.parity.report.gate`); raises ParityError when nothing can be compared.
    """
    t0 = time.perf_counter()
    with pg.quiet(verbose):
        feeds, reference, source, chosen = _reference(cfg, inputs_path, reference_path, source_onnx, goldens_only)
        base = Baseline(feeds, reference, Judging.of(cfg, feeds, reference, source_onnx))
        arts = {kind: _onnx_entry(cfg, kind, path, base) for kind, path in artifacts.items()}
        if engines is not None and engines.is_dir():
            engine_targets = [t.name for t in gpu_targets(cfg.targets, cfg.target_specs)]  # cpu targets have no engine
            arts.update(engine_entries(engines, engine_targets, cfg, base))
    gates = gating_kinds(cfg, arts)
    compared = [a for k, a in arts.items() if a.status != "skipped" and k in gates]
    return ParityReport(
        model=cfg.model.name,
        passed=bool(compared) and all(a.passed is True for a in compared),
        gating=sorted(gates),
        not_gating={
            k: f"no target serves {k} as configured: its verdict is reported, and under precision auto it decides whether auto may choose it" for k in arts if k not in gates
        },
        reference=Reference(
            source=source,
            samples=len(feeds),
            split=chosen.split,
            rows_available=chosen.rows_available,
            calibration_rows_left_out=chosen.calibration_rows_left_out,
            rows=chosen.rows,
            sha256=chosen.sha256,
            batch_sizes=[int(next(iter(f.values())).shape[0]) if np.ndim(next(iter(f.values()))) else 1 for f in feeds],
            inputs=str(inputs_path),
            outputs=str(reference_path),
            contract=(base.judging.declared or base.judging.observed).to_json(),
            coverage=reference_coverage(reference, base.judging),
        ),
        artifacts=arts,
        notes=list(NOTES),
        seconds=round(time.perf_counter() - t0, 2),
    )


def _reference(cfg: PipelineConfig, inputs_path: Path, reference_path: Path, source_onnx: Path | None, goldens_only: bool) -> tuple[list[pg.Feed], Any, str, SampleChoice]:
    """(feeds, reference results, source, how the samples were chosen): from the reference model (and saved as goldens),
    or from the saved goldens when ``goldens_only`` or when a PyTorch reference cannot run here."""
    torch_missing = cfg.model.source == "factory" and not goldens_only and not _torch_importable()
    if not (goldens_only or torch_missing):
        feeds, reference, source, chosen = reference_results(cfg, source_onnx)
        pg.save_goldens(feeds, reference, inputs_path, reference_path)
        return feeds, reference, source, chosen
    if torch_missing:
        print("[parity] torch is not importable: comparing against the saved goldens instead of the PyTorch model")
    feeds, reference = pg.load_goldens(inputs_path, reference_path)
    split = f"the saved goldens {inputs_path} (held out of calibration when they were written)"
    return feeds, reference, "goldens", SampleChoice(split, sum(holdout.rows_of(f) for f in feeds), holdout.digest(feeds))


def _onnx_entry(cfg: PipelineConfig, kind: str, path: Path, base: Baseline) -> ArtifactResult:
    """The entry of one ONNX artifact: compared, or skipped when its (optional) conversion failed."""
    if (why := optional.reason(path)) is not None:  # a precision no target serves, whose conversion failed
        return ArtifactResult(status="skipped", reason=f"not available: {why}", file=str(path))
    # Load once here so a missing/corrupt file gets the pipeline's own message, not ORT's.
    declared = Contract.of(*graph_io(onnx_tools.load_model(path, f"{kind} ONNX artifact")))
    return compare_artifact(Artifact(kind, pg.onnxrt_runner(path, kind), path, getattr(cfg.parity, kind), declared=declared), base)


def reference_coverage(reference: Any, judging: Judging) -> dict[str, Coverage]:
    """Per float output of the reference: its rows, how much they vary and (classifiers) how many classes they cover."""
    out: dict[str, Coverage] = {}
    ref_out = pg.outputs(reference)
    for name in ref_out[0] if ref_out else []:
        ref = [r[name] for r in ref_out]
        if np.asarray(ref[0]).dtype.kind == "f":
            c = quality.degeneracy(ref, ref, judging.kinds.get(name), int(judging.axes.get(name, -1))).to_json()
            out[name] = Coverage.from_json({k: v for k, v in c.items() if k != "error"})
    return out


def gating_kinds(cfg: PipelineConfig, arts: Mapping[str, Any]) -> set[str]:
    """Which compared artifacts must pass for the stage to pass: fp32 and every engine (as always), and fp16 or int8 when
    a target serves it (the ONNX Runtime model's target, or an engine built from it). Under ``auto``, fp16 and int8 are
    candidates: their verdicts are reported and the choose stage takes only a candidate that passed. An artifact no
    target serves never fails the stage (nothing optional blocks what was asked)."""
    wanted = {"fp32"} | {k for k in arts if k.startswith("trt@")}
    engines = {str(p) for t, p in cfg.engine_precision.items() if cfg.target_specs[t].kind == "gpu"}
    wanted |= {p for p in ("fp16", "int8") if str(cfg.serving.precision) == p or p in engines}
    return {k for k in arts if k in wanted}


def headline(report: ParityReport) -> dict[str, Any]:
    """The verdict and each compared artifact's worst absolute error per output (dvc metrics)."""
    arts: dict[str, Any] = {}
    for kind, art in report.artifacts.items():
        if art.outputs is None:
            arts[kind] = {"status": art.status}
            continue
        arts[kind] = {"passed": art.passed, "max_abs": {o: v.max_abs for o, v in art.outputs.items()}}
        q = {o: v.quality.metrics for o, v in art.outputs.items() if v.quality}
        if q:
            arts[kind]["quality"] = q
    ref = report.reference
    return {"passed": report.passed, "samples": ref.samples if ref else None, "rows": ref.rows if ref else None, "artifacts": arts}


def _table_rows(report: ParityReport) -> list[list[str]]:
    """One row per artifact output (one per artifact never compared): the statistics, tolerances and verdict."""
    rows: list[list[str]] = []
    f = fmt
    for kind, art in report.artifacts.items():
        if art.outputs is None:
            rows.append([kind, "-", "-", "-", "-", "-", "-", "-", "-", f"{art.status.upper()}: {art.reason or ''}"])
            continue
        for out, o in art.outputs.items():
            need = round_up(o.min_passing_atol) if o.min_passing_atol is not None else None
            rows.append([kind, out, o.stat or "-", f(o.max_abs), f(o.max_rel), f(o.mean_abs), f(o.atol), f(o.rtol), f(need), verdict_word(o)])
    return rows


def print_table(report: ParityReport) -> None:
    """A rich table of every artifact and output (falls back to plain lines if rich is missing)."""
    rows = _table_rows(report)
    head = ["artifact", "output", "stat", "max abs", "max rel", "mean abs", "atol", "rtol", "min atol", "result"]
    title = _title(report)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        for r in [head, *rows]:
            print(" | ".join(r))
        print("\n".join(quality_lines(report)))
        return
    table = Table(title=title)
    for h in head:
        table.add_column(h, justify="left" if h in ("artifact", "output", "stat", "result") else "right")
    for r in rows:
        style = "green" if r[-1] == "PASS" else ("yellow" if r[-1].startswith(("SKIPPED", "INCONCLUSIVE")) else "red")
        table.add_row(*r, style=style)
    Console(width=160).print(table)
    for line in quality_lines(report):
        print(line)


def _title(report: ParityReport) -> str:
    ref = report.reference
    if ref is None:
        return f"parity, {report.seconds} s"
    held = f", {ref.rows} rows held out of calibration" if ref.calibration_rows_left_out is not None else ""
    return f"parity vs {ref.source} reference, {ref.samples} samples (batch sizes {ref.batch_sizes}){held}, {report.seconds} s"


def verdict_word(o: OutputResult) -> str:
    """PASS, FAIL, or INCONCLUSIVE (every threshold met on reference rows that cannot judge)."""
    return "PASS" if o.passed else ("INCONCLUSIVE" if o.elementwise_passed and o.only_coverage() else "FAIL")


def _quality_line(kind: str, out: str, q: Quality, gating: bool) -> str:
    """``quality int8/embedding (embedding): cosine_min 0.9831 (>= 0.98), ...``; FAIL marks a metric below its threshold."""
    parts = []
    for m, v in q.metrics.items():
        bound = q.thresholds.get(m)
        mark = " FAIL" if m in q.failed else ""
        parts.append(f"{m} {'n/a' if v is None else f'{v:.4f}'}" + (f" (>= {bound:g}{mark})" if bound is not None else ""))
    if q.coverage is not None and q.coverage.classes_covered is not None:
        parts.append(f"{q.coverage.rows} rows cover {q.coverage.classes_covered} of {q.coverage.classes} classes")
    return f"quality {kind}/{out} ({q.kind}): " + ", ".join(parts) + ("" if gating else " [not gating]")


def quality_lines(report: ParityReport) -> list[str]:
    """``quality int8/embedding: cosine_min 0.9831 (>= 0.98) ...`` per judged output, then the coverage notes."""
    lines = []
    gates = report.gating_kinds()
    for kind, art in report.artifacts.items():
        outputs = art.outputs or {}
        lines += [_quality_line(kind, out, o.quality, gates is None or kind in gates) for out, o in outputs.items() if o.quality]
        for out, o in outputs.items():
            blocking = o.coverage_reasons()
            lines += [f"{'cannot judge' if r in blocking else 'note:'} {kind}/{out}: {r}" for r in o.coverage_reasons(blocking=False)]
    return lines


def text_parity(cfg: PipelineConfig, fp32: Path, sentences: Path) -> TextParity:
    """The text endpoint's parity on the FP32 file (pipeline/parity/text.py), printed as one line."""
    from pipeline.core.config.files import tokenizer_file
    from pipeline.core.samples import read_sentences
    from pipeline.parity.text import endpoint_parity

    tok = cfg.model.tokenizer
    assert tok is not None
    res = endpoint_parity(tok, tokenizer_file(tok.path), fp32, read_sentences(sentences), cfg.parity.fp32.atol)
    verdict = "passed" if res.passed else "FAILED"
    rows = f"{res.rows} rows ({', '.join(res.cases)} among them) in one padded batch against each alone"
    print(f"[parity] text endpoint {cfg.model.name}_text: {verdict}, {rows}: max |diff| {res.max_abs:.2e} (atol {res.atol:g})")
    return res
