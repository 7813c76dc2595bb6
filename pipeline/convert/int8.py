"""int8 stage: INT8 with ONNX Runtime's quantization tooling, calibrated on real samples, with automatic FP32 fallback.

``int8.mode=static`` (the default for every built-in model) writes a QDQ model: weights quantized per output channel,
activations quantized with ranges calibrated on the calibration set (MinMax, Entropy or Percentile). ONNX Runtime's
CPU provider fuses the Q/DQ pairs into integer kernels. Activations default to uint8 with a zero point, which that
provider runs fastest and which fits one-sided activations best (measured on MiniLM: symmetric int8 activations were
both slower there and less exact). TensorRT builds an engine from the same file when its activations are symmetric
int8 (explicit quantization reads nothing else), so a fleet with a GPU int8 target sets that and gets one file for
both. ``dynamic`` computes activation ranges per request instead (ONNX Runtime only).

Only the op types in ``int8.op_types`` are quantized (MatMul, Gemm, Conv: the weight-heavy ops, where integer
kernels pay); an op type ONNX Runtime has no quantizer for in the chosen mode is left FP32 and reported.

With ``int8.smoothing`` set, a smoothed copy of the graph (pipeline/convert/int8_smooth.py, SmoothQuant) is quantized
beside the plain one and the better by the stop rule is kept.

The automatic fallback: the quantized model runs beside the FP32 model on the calibration rows, split again into
search and validation rows (``int8.fallback.validation``), and is judged by the parity gate's quality thresholds
(``parity.int8.quality``, by ``model.output_kinds``). While it fails, the nodes that introduce the most error on the
search rows (pipeline/convert/int8_errors.py, ranked once) stay FP32, as many as a bisection finds that pass the stop
rule on both parts (pipeline/convert/int8_search.py), in at most ``int8.fallback.max_attempts`` quantizations. Ranges,
smoothing scales and the ranking are fitted on the search rows only. A model that still fails is written anyway (the
closest candidate): the parity gate judges it on the rows held out of calibration (pipeline/core/holdout.py), which
nothing here has seen, and refuses to ship it. The search runs only when some target of the fleet serves int8 or auto
(``int8_in_fleet``, derived from the fleet): a fleet that never serves INT8 should not pay for it; otherwise only the
first quantizations run, for parity to report the quality, and the report says why the search did not run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from pipeline.convert import calibration, int8_errors, int8_search, int8_smooth
from pipeline.convert.fp16_safety import name_nodes
from pipeline.core import holdout, onnx_tools
from pipeline.core.config import Int8Config, OutputKind, PipelineConfig, QuantMode
from pipeline.core.errors import QuantizationError
from pipeline.core.holdout import rows_of
from pipeline.core.samples import input_specs
from pipeline.core.specs import graph_io
from pipeline.records.int8 import Activations, Attempt, BlockedNode, Calibration, Check, Fallback, Int8Report, NodeFate, Part, RankedNode, Split
from pipeline.core.verdicts import Quality

Feed = dict[str, Any]


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over the calibration samples."""

    def __init__(self, feeds: list[Feed]) -> None:
        self._feeds, self._i, self._end = feeds, 0, len(feeds)

    def get_next(self) -> Feed | None:
        if self._i >= self._end:
            return None
        self._i += 1
        return self._feeds[self._i - 1]

    def rewind(self) -> None:
        self._i = 0

    def set_range(self, start_index: int, end_index: int) -> None:
        """Serve only samples [start, end): ONNX Runtime calls it to calibrate in strides."""
        self._i, self._end = start_index, min(end_index, len(self._feeds))

    def __len__(self) -> int:
        return len(self._feeds)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """ONNX Runtime's quantizer logs through the root logger (a pre-processing hint per call); the report says what matters."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def supported_ops(mode: QuantMode) -> set[str]:
    """Op types ONNX Runtime's quantizer has a rule for in ``mode``."""
    from onnxruntime.quantization.registry import IntegerOpsRegistry, QDQRegistry, QLinearOpsRegistry

    return set(IntegerOpsRegistry) if mode == QuantMode.dynamic else set(QDQRegistry) | set(QLinearOpsRegistry)


def plan_ops(cfg: Int8Config) -> tuple[list[str], dict[str, str]]:
    """(op types to quantize, {op type: why it is left FP32}) for the configured ``int8.op_types``.

    Raises QuantizationError when ONNX Runtime quantizes none of them.
    """
    ok = supported_ops(cfg.mode)
    skipped = {op: f"ONNX Runtime has no {cfg.mode} quantizer for {op}: left FP32" for op in cfg.op_types if op not in ok}
    ops = [op for op in cfg.op_types if op in ok]
    if not ops:
        raise QuantizationError(
            "no op type of int8.op_types can be quantized by ONNX Runtime",
            details=skipped,
            fix="list op types ONNX Runtime quantizes (MatMul, Gemm, Conv, ...) in int8.op_types",
        )
    return ops, skipped


def quantize(src: Path, out: Path, cfg: Int8Config, feeds: list[Feed], ops: list[str], exclude: list[str], cache: Path) -> None:
    """Quantize ``src`` into ``out`` with ONNX Runtime; static ranges come from ``feeds`` once, then from ``cache``.

    Raises QuantizationError with the quantizer's message.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    if cfg.mode != QuantMode.dynamic and cfg.per_channel:
        src = opset_for_qdq(src, out.parent)
    try:
        with _quiet():
            if cfg.mode == QuantMode.dynamic:
                quantize_dynamic(
                    str(src), str(out), op_types_to_quantize=ops, per_channel=cfg.per_channel, reduce_range=cfg.reduce_range, weight_type=QuantType.QInt8, nodes_to_exclude=exclude
                )
                return
            method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile}
            extra: dict[str, Any] = {"ActivationSymmetric": cfg.activation_symmetric, "WeightSymmetric": True}
            if not cfg.quantize_outputs:
                extra["OpTypesToExcludeOutputQuantization"] = ops
            if cfg.calibration.method == "percentile":
                extra["CalibPercentile"] = cfg.calibration.percentile
            if cfg.calibration.method != "minmax":
                # The histogram calibrators stack every sample's activations into one array, which fails for samples of
                # different shapes (sequences padded per batch); one sample per stride, merged histogram by histogram.
                extra["CalibStridedMinMax"] = 1
            quantize_static(
                str(src),
                str(out),
                _Reader(feeds),
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=ops,
                per_channel=cfg.per_channel,
                reduce_range=cfg.reduce_range,
                activation_type=QuantType.QInt8 if cfg.activation_type == "int8" else QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=exclude,
                calibrate_method=method[str(cfg.calibration.method)],
                extra_options=extra,
                calibration_cache_path=str(cache),
            )
    except Exception as e:  # noqa: BLE001 - the quantizer raises ValueError/RuntimeError/ORT errors on graphs it cannot handle
        raise QuantizationError(
            "ONNX Runtime could not quantize the model",
            details={"mode": str(cfg.mode), "op types": ops, "error": f"{type(e).__name__}: {e}"[:400]},
            fix="leave the failing node FP32 (int8.nodes_to_exclude) or its op type out of int8.op_types; int8.mode=dynamic needs no calibration",
        ) from None


QDQ_PER_CHANNEL_OPSET = 13  # DequantizeLinear's `axis` (per-channel scales) exists from opset 13


def opset_for_qdq(src: Path, work: Path) -> Path:
    """``src``, or a copy converted to opset 13 in ``work`` when its opset is older (reused by later attempts).

    ONNX Runtime's quantizer writes per-channel DequantizeLinear nodes with an ``axis`` attribute whatever the graph's
    opset; below 13 that graph is invalid and ONNX Runtime refuses to load it. The converter is ONNX's own.

    Raises:
        QuantizationError: the graph cannot be converted (the message says how to quantize per tensor instead).
    """
    from onnx import version_converter

    model = onnx.load(str(src), load_external_data=False)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=QDQ_PER_CHANNEL_OPSET)
    if opset >= QDQ_PER_CHANNEL_OPSET:
        return src
    dest = work / f"{src.stem}.opset{QDQ_PER_CHANNEL_OPSET}.onnx"
    if not dest.is_file():
        try:
            onnx.save(version_converter.convert_version(onnx.load(str(src)), QDQ_PER_CHANNEL_OPSET), str(dest))
        except Exception as e:  # noqa: BLE001 - the converter raises RuntimeError/ConvertError per unsupported op
            raise QuantizationError(
                f"per-channel INT8 needs opset {QDQ_PER_CHANNEL_OPSET} and the graph is opset {opset}, which ONNX cannot convert",
                fix="quantize per tensor (int8.per_channel=false), or re-export the model at opset 13 or newer",
                details={"error": f"{type(e).__name__}: {e}"[:300]},
            ) from None
    return dest


def node_fates(fp32: onnx.ModelProto, quant: onnx.ModelProto, cfg: Int8Config, skipped_ops: Mapping[str, str], excluded: Mapping[str, str]) -> list[NodeFate]:
    """Every node of a quantizable (or requested) op type: quantized, or FP32 and why."""
    done = {n.name for n in int8_errors.quantized_nodes(fp32, quant, cfg.op_types)}
    out: list[NodeFate] = []
    for n in fp32.graph.node:
        if n.op_type not in cfg.op_types:
            continue
        if n.name in excluded:
            # QDQ quantizes a tensor once for all its consumers: a node kept FP32 beside a quantized one reads the
            # dequantized copy of their shared input, though its own weights and output stay float.
            shared = " (its activation input stays quantized for another consumer)" if n.name in done else ""
            out.append(NodeFate(n.name, n.op_type, "fp32", excluded[n.name] + shared))
        elif n.name in done:
            out.append(NodeFate(n.name, n.op_type, "int8"))
        else:
            reason = skipped_ops.get(n.op_type) or "ONNX Runtime's quantizer left it FP32 (e.g. no constant weight or no calibrated range)"
            out.append(NodeFate(n.name, n.op_type, "fp32", reason))
    return out


def run_int8(src: Path, calibration_path: Path, out: Path, cfg: PipelineConfig) -> Int8Report:
    """Quantize ``src`` into ``out`` (a temporary path), with the fallback search when the fleet serves INT8; return the report.

    Raises QuantizationError: unreadable calibration set, samples that do not fit the graph, too few rows for the
    fallback's split, a quantizer failure, NaN/Inf from the quantized model.
    """
    q = cfg.int8
    t0 = time.perf_counter()
    fp32 = onnx_tools.load_model(src, "simplified FP32 model")
    feeds, split = _calibration_rows(calibration_path, fp32, cfg)
    ops, skipped_ops = plan_ops(q)
    with tempfile.TemporaryDirectory(prefix="int8-", dir=out.parent) as tmp:
        graphs, smoothing = _graphs(src, fp32, Path(tmp), q, split, ops)
        judge = int8_search.Judge(graphs["plain"].path, split, {o: OutputKind(k) for o, k in cfg.model.output_kinds.items()}, cfg.parity.int8.quality, cfg.model.output_axes)
        # Everything fitted to data (ranges, smoothing scales, the node ranking) comes from the search rows: the validation
        # rows must be as unseen as the held-out ones for the stop rule to say anything about those.
        run = _Run(q, ops, split.calibration.feeds, judge, Path(tmp), dict.fromkeys(q.nodes_to_exclude, "int8.nodes_to_exclude"))
        start, first = run.first_quantizations(graphs, out)
        g = graphs[start.graph]
        search = q.fallback.enabled and cfg.int8_in_fleet and bool(judge.kinds) and not start.passed and q.fallback.max_attempts > len(run.attempts)
        ranked, chosen = run.search(g, first, start, out) if search else ([], start)
        fallback = _fallback_record(cfg, run, split, ranked, chosen, start)
        run.excluded |= {b.node: b.reason for b in fallback.blocked_nodes}
        quant = _checked(out, feeds)
    return Int8Report(
        mode=str(q.mode),
        format="QDQ" if q.mode == QuantMode.static else "dynamic (integer ops)",
        per_channel=q.per_channel,
        reduce_range=q.reduce_range,
        quantize_outputs=q.quantize_outputs,
        activations=Activations(str(q.activation_type), q.activation_symmetric) if q.mode == QuantMode.static else None,
        calibration=_calibration_record(calibration_path, feeds, split, q),
        op_types=ops,
        op_types_left_fp32=skipped_ops,
        smoothing=smoothing.record(start.graph == "smoothed", {a.graph: a.margin for a in run.attempts[:2]}) if smoothing else None,
        nodes=node_fates(g.model, quant, q, skipped_ops, run.excluded),
        fallback=fallback,
        passed_on_calibration=chosen.passed if judge.kinds else None,
        quality_on_calibration=chosen.quality,
        size_bytes_fp32=src.stat().st_size,
        size_bytes_int8=out.stat().st_size,
        seconds=round(time.perf_counter() - t0, 2),
    )


def _calibration_rows(path: Path, fp32: onnx.ModelProto, cfg: PipelineConfig) -> tuple[list[Feed], holdout.Split]:
    """The calibration set, checked against the graph's inputs, and its rows cut into search and validation rows.

    Raises QuantizationError: an unreadable set, samples that do not fit the graph, too few rows for the split.
    """
    feeds = calibration.load(path)
    graph_inputs = graph_io(fp32)[0]
    calibration.check_feeds(feeds, graph_inputs)
    return feeds, search_split(feeds, cfg.int8.fallback.validation, holdout.batched(input_specs(cfg.model, graph_inputs)))


@dataclass(frozen=True)
class _Graph:
    """An FP32 graph to quantize: its file, its proto (for per-layer errors), its cached activation ranges."""

    path: Path
    model: onnx.ModelProto
    cache: Path


def _graphs(src: Path, fp32: onnx.ModelProto, tmp: Path, q: Int8Config, split: holdout.Split, ops: list[str]) -> tuple[dict[str, _Graph], int8_smooth.Smoothing | None]:
    """The graphs to quantize: the FP32 model with every node named (``plain``) and, with ``int8.smoothing`` set, a
    smoothed copy fitted on the search rows (``smoothed``); returns them and what smoothing did."""
    source = src
    if name_nodes(fp32):  # nodes_to_exclude works by name, as FP16's block list does: unnamed nodes get stable names
        source = tmp / "model.fp32.named.onnx"
        onnx_tools.save_model(fp32, source)
    graphs = {"plain": _Graph(source, fp32, tmp / "ranges.json")}
    if q.smoothing is None:
        return graphs, None
    # A smoothed copy keeps every node's name, so exclusions and per-layer errors still match.
    smoothed, smoothing = int8_smooth.smooth(fp32, split.calibration.feeds, q.smoothing, ops, skip=q.nodes_to_exclude)
    graphs["smoothed"] = _Graph(tmp / "model.fp32.smoothed.onnx", smoothed, tmp / "ranges.smoothed.json")
    onnx_tools.save_model(smoothed, graphs["smoothed"].path)
    return graphs, smoothing


@dataclass
class _Run:
    """The quantizations of one run of the stage: the settings, the op types, the search rows ranges are fitted on,
    the judge, the work directory, the nodes kept FP32 by configuration, and every attempt so far."""

    q: Int8Config
    ops: list[str]
    fit: list[Feed]
    judge: int8_search.Judge
    tmp: Path
    excluded: dict[str, str]
    attempts: list[Attempt] = field(default_factory=list)
    firsts: int = 0  # the first quantizations, one per graph; the search's come after

    @property
    def searched(self) -> bool:
        return len(self.attempts) > self.firsts

    def quantize(self, g: _Graph, dest: Path, fallback: Iterable[str] = ()) -> None:
        quantize(g.path, dest, self.q, self.fit, self.ops, sorted([*self.excluded, *fallback]), g.cache)

    def record(self, graph: str, k: int, first: int8_search.Judged, now: int8_search.Judged, started: float) -> Attempt:
        """Add one quantization to the attempts, as the report lists it."""
        a = Attempt(
            attempt=len(self.attempts) + 1,
            kept_fp32=len(self.excluded) + k,
            fallback_nodes=k,
            passed=int8_search.passes(first, now, self.q.fallback.min_margin),
            margin=int8_search.margin(first, now),
            checks={name: Check(**c) for name, c in int8_search.checks(first, now).items()},
            quality=_verdicts(now),
            seconds=round(time.perf_counter() - started, 2),
            graph=graph,
        )
        self.attempts.append(a)
        return a

    def first_quantizations(self, graphs: Mapping[str, _Graph], out: Path) -> tuple[Attempt, int8_search.Judged]:
        """Quantize each graph once (ranges from the search rows); write the better by the stop rule to ``out``.
        Returns its attempt and verdicts."""
        firsts: dict[str, int8_search.Judged] = {}
        for name, g in graphs.items():
            t = time.perf_counter()
            self.quantize(g, self.tmp / f"{name}.int8.onnx")
            j = firsts[name] = self.judge(self.tmp / f"{name}.int8.onnx")
            self.record(name, 0, j, j, t)
        self.firsts = len(self.attempts)
        # Smoothing moves rounding error into the weights, and tightens every channel's range to the rows it was fitted on,
        # which not every model takes well: the stop rule's margin says which graph the search starts from (plain on a tie).
        start = max(self.attempts, key=lambda a: (a.passed, a.margin, a.graph == "plain"))
        os.replace(self.tmp / f"{start.graph}.int8.onnx", out)
        return start, firsts[start.graph]

    def search(self, g: _Graph, first: int8_search.Judged, start: Attempt, out: Path) -> tuple[list[int8_errors.NodeError], Attempt]:
        """Keep the nodes that introduce the most error FP32, as few as a bisection finds that pass the stop rule, in the
        quantizations left; write the chosen one (the first passing, else the closest) to ``out``.
        Returns the ranking and the chosen attempt."""
        quant = onnx_tools.load_model(out, "INT8 model")
        ranked = [e for e in int8_errors.node_errors(g.model, quant, self.fit, int8_errors.quantized_nodes(g.model, quant, self.ops)) if e.node not in self.excluded]
        trial, best = self.tmp / "trial.onnx", self.tmp / "best.onnx"
        chosen = start

        def evaluate(k: int) -> bool:
            nonlocal chosen
            t = time.perf_counter()
            self.quantize(g, trial, (e.node for e in ranked[:k]))
            a = self.record(start.graph, k, first, self.judge(trial), t)
            if a.passed or (not chosen.passed and a.margin > chosen.margin):  # a later pass has a smaller k
                os.replace(trial, best)
                chosen = a
            return a.passed

        int8_search.bisect(len(ranked), evaluate, self.q.fallback.max_attempts - len(self.attempts))
        if chosen.fallback_nodes:
            os.replace(best, out)
        return ranked, chosen


def _verdicts(j: int8_search.Judged) -> dict[str, dict[str, Quality]]:
    """Both parts' verdicts as the report carries them."""
    return {part: {o: Quality.from_json(v) for o, v in outs.items()} for part, outs in int8_search.to_json(j).items()}


def _checked(out: Path, feeds: list[Feed]) -> onnx.ModelProto:
    """The INT8 model at ``out``, once ONNX Runtime opens it and it gives finite outputs on the first calibration samples.

    Raises QuantizationError (or OnnxModelError from the session) so a broken graph fails here, not in a later stage.
    """
    sess = onnx_tools.session(out, "INT8 model")
    for i, feed in enumerate(feeds[:2]):
        if bad := onnx_tools.nonfinite(onnx_tools.run(sess, feed, "INT8 model")):
            raise QuantizationError(
                f"the INT8 model produces NaN/Inf on calibration sample {i}", details={"outputs": bad}, fix="keep the offending nodes FP32 (int8.nodes_to_exclude)"
            )
    return onnx_tools.load_model(out, "INT8 model")


def _calibration_record(path: Path, feeds: list[Feed], split: holdout.Split, q: Int8Config) -> Calibration:
    """The calibration set's identity and how it was used."""
    return Calibration(
        **calibration.record(path),
        rows=sum(rows_of(f) for f in feeds),
        samples=len(feeds),
        fitted_on=f"the {split.calibration.rows} search rows (ranges, smoothing scales, node ranking)",
        validation_rows=split.holdout.rows,
        method=str(q.calibration.method) if q.mode == QuantMode.static else "none (dynamic)",
        percentile=q.calibration.percentile if q.calibration.method == "percentile" else None,
    )


def _part(p: holdout.Part) -> Part:
    return Part(p.rows, len(p.feeds), list(p.units), holdout.digest(p.feeds, p.batched))


def _fallback_record(cfg: PipelineConfig, run: _Run, split: holdout.Split, ranked: list[int8_errors.NodeError], chosen: Attempt, start: Attempt) -> Fallback:
    """The report's account of the fallback: settings, the split, the ranking, the attempts, and the nodes the chosen
    attempt keeps FP32 (``start``: the first quantization the search started from)."""
    fb = cfg.int8.fallback
    kinds = run.judge.kinds
    return Fallback(
        enabled=fb.enabled,
        max_attempts=fb.max_attempts,
        in_fleet=cfg.int8_in_fleet,
        judged_outputs={o: str(k) for o, k in kinds.items()},
        thresholds="parity.int8.quality",
        judged_on="the calibration rows, split into search and validation rows (never the rows parity holds out)",
        split=Split(fb.validation, holdout.RULE.replace("int8.calibration.holdout", "int8.fallback.validation"), _part(split.calibration), _part(split.holdout)),
        stop_rule=int8_search.RULE,
        strategy="bisection over the per-layer error ranking (search rows)",
        ranking=[RankedNode(e.node, e.op, round(e.introduced, 6)) for e in ranked],
        searched=run.searched,
        not_searched=None if run.searched else not_searched(cfg, start.passed, bool(kinds)),
        chosen_attempt=chosen.attempt,
        blocked_nodes=_blocked(ranked, chosen),
        attempts=run.attempts,
    )


def search_split(feeds: list[Feed], share: float, batched: bool) -> holdout.Split:
    """The calibration rows cut into search and validation rows (pipeline/core/holdout.py's rule); raise
    QuantizationError when either part is empty."""
    s = holdout.split(feeds, share, batched)
    if not s.calibration.feeds or not s.holdout.feeds:
        raise QuantizationError(
            f"{s.calibration.rows + s.holdout.rows} calibration rows: int8.fallback.validation={share} leaves {s.calibration.rows} search and {s.holdout.rows} validation rows",
            fix="give model.data more rows, or move int8.fallback.validation toward 0.5",
        )
    return s


def _blocked(ranked: list[int8_errors.NodeError], chosen: Attempt) -> list[BlockedNode]:
    """The nodes the chosen attempt keeps FP32, each with why."""
    k, n = chosen.fallback_nodes, len(ranked)
    verdict = (
        f"the {k} worst kept FP32 pass the stop rule (attempt {chosen.attempt})"
        if chosen.passed
        else f"the {k} worst kept FP32 came closest to the stop rule (attempt {chosen.attempt}, margin {chosen.margin:+.4f}); none passed"
    )
    return [
        BlockedNode(
            node=e.node,
            op=e.op,
            rank=i + 1,
            introduced=round(e.introduced, 6),
            output_error=round(e.output_error, 6),
            input_error=round(e.input_error, 6),
            reason=f"fallback: #{i + 1} of {n} quantized nodes by the error it introduces on the search rows ({e.introduced:.3g} at "
            f"'{e.output}', input {e.input_error:.3g} -> output {e.output_error:.3g}); {verdict}",
        )
        for i, e in enumerate(ranked[:k])
    ]


def not_searched(cfg: PipelineConfig, passed: bool, judged: bool) -> str:
    """Why the fallback's search did not run, as the report says it."""
    if not judged:
        return "no output is judged (model.output_kinds is empty): nothing to search for"
    if passed:
        return "the first quantization passes the stop rule (parity.int8.quality on the search and the validation rows)"
    if not cfg.int8.fallback.enabled:
        return "int8.fallback.enabled=false"
    if not cfg.int8_in_fleet:
        return (
            "no target of the fleet serves int8 or auto (int8_in_fleet=false, derived from targets and "
            "target_specs.<target>.precision): quantized without the search, for parity to report its quality; a fleet that serves "
            "it runs the search (up to int8.fallback.max_attempts quantizations)"
        )
    return f"int8.fallback.max_attempts={cfg.int8.fallback.max_attempts}: no quantization left after the first (plain, and smoothed with int8.smoothing)"


def headline(report: Int8Report) -> dict[str, Any]:
    """Size, node counts, attempts and the chosen model's quality on the search and validation rows (dvc metrics)."""
    # The FP32 size is fp16's metric already; blocked nodes, whether the search ran and the time are in the report.
    return {
        "quantized_count": report.quantized_count,
        "kept_fp32_count": report.kept_fp32_count,
        "size_bytes_int8": report.size_bytes_int8,
        "passed_on_calibration": report.passed_on_calibration,
        "attempts": len(report.fallback.attempts),
        "quality_on_calibration": {part: {o: v.metrics for o, v in verdicts.items()} for part, verdicts in report.quality_on_calibration.items()},
    }
