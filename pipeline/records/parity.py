"""The parity report (``parity.json``): the reference the artifacts were judged against and, per artifact, its verdict,
the sha256 of the file compared and, per output, the statistics against its tolerances and quality thresholds.

The parity stage writes it (pipeline/parity/); the choose and repository stages, ``release build`` and the CI's
merge of the GPU jobs' engine entries read it, and only through :func:`read_report`. :meth:`ParityReport.verdict`
answers "did artifact X pass?" for every stage that ships an artifact.

Keys the stage writes only sometimes stay out when they do not apply: ``to_json`` omits such a field when it is None
(or, for ``problems``, empty), so the stage's report read and written again has the same key paths. A report written
by hand or by an older version may leave out more: a number it does not give reads as None, as a null would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pipeline.core.atomic import read_json
from pipeline.core.errors import ParityError
from pipeline.core.verdicts import Coverage, Quality, number, with_optional

SCHEMA_VERSION = 1
_FIX = "rerun the parity stage (dvc repro parity)"


@dataclass(frozen=True)
class OutputResult:
    """One output of one artifact over every sample: the error statistics, the tolerances, the verdict and, for a
    judged output, its quality (or, for any other float output, whether the reference rows can judge it)."""

    passed: bool
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    mean_abs: Optional[float] = None
    stat: Optional[str] = None  # the statistic judged: elemwise, max, mean, median or quantile
    stat_abs: Optional[float] = None
    stat_rel: Optional[float] = None
    atol: Optional[float] = None
    rtol: Optional[float] = None
    min_passing_atol: Optional[float] = None  # the smallest atol that passes every sample (None: none can, or a problem)
    samples: int = 0
    failed_samples: int = 0
    nonfinite: int = 0
    quantile: Optional[float] = None  # with stat quantile
    problems: list[str] = field(default_factory=list)  # what no tolerance fixes (missing output, shape, I/O contract)
    elementwise_passed: Optional[bool] = None  # the verdict before quality and coverage (None: not split, e.g. a canary's)
    quality: Optional[Quality] = None
    coverage: Optional[Coverage] = None

    def to_json(self) -> dict[str, Any]:
        d = {
            "passed": self.passed,
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "mean_abs": self.mean_abs,
            "stat": self.stat,
            "stat_abs": self.stat_abs,
            "stat_rel": self.stat_rel,
            "atol": self.atol,
            "rtol": self.rtol,
        }
        d = with_optional(d, quantile=self.quantile) | {
            "min_passing_atol": self.min_passing_atol,
            "samples": self.samples,
            "failed_samples": self.failed_samples,
            "nonfinite": self.nonfinite,
        }
        return with_optional(
            d,
            problems=list(self.problems) or None,
            elementwise_passed=self.elementwise_passed,
            coverage=self.coverage.to_json() if self.coverage else None,
            quality=self.quality.to_json() if self.quality else None,
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OutputResult:
        return cls(
            passed=bool(d["passed"]),
            max_abs=number(d.get("max_abs")),
            max_rel=number(d.get("max_rel")),
            mean_abs=number(d.get("mean_abs")),
            stat=None if d.get("stat") is None else str(d["stat"]),
            stat_abs=number(d.get("stat_abs")),
            stat_rel=number(d.get("stat_rel")),
            atol=number(d.get("atol")),
            rtol=number(d.get("rtol")),
            min_passing_atol=number(d.get("min_passing_atol")),
            samples=int(d.get("samples", 0)),
            failed_samples=int(d.get("failed_samples", 0)),
            nonfinite=int(d.get("nonfinite", 0)),
            quantile=number(d.get("quantile")),
            problems=[str(p) for p in d.get("problems") or []],
            elementwise_passed=d.get("elementwise_passed"),
            quality=Quality.from_json(d["quality"]) if d.get("quality") else None,
            coverage=Coverage.from_json(d["coverage"]) if d.get("coverage") else None,
        )

    def coverage_reasons(self, blocking: bool = True) -> list[str]:
        """Why the reference rows cannot judge this output's verdict (``blocking=False``: every reason, also those that
        void no threshold set, e.g. one class where top-1 agreement is not checked); empty: they can."""
        cov = (self.quality.coverage if self.quality else None) or self.coverage
        if cov is None:
            return []
        return list((cov.blocking if blocking else cov.reasons) or [])

    def only_coverage(self) -> bool:
        """Failed only because the reference rows cannot judge it (every threshold met)."""
        cov = self.quality.coverage if self.quality is not None else self.coverage
        judgeable = True if cov is None or cov.judgeable is None else cov.judgeable
        return (self.quality is None or not self.quality.failed) and not judgeable


@dataclass(frozen=True)
class ContractCheck:
    """Whether the artifact kept the reference's I/O contract (names, dtypes, ranks), and how it broke it."""

    passed: bool
    problems: list[str] = field(default_factory=list)


STATUSES = ("passed", "failed", "inconclusive", "error", "skipped")


@dataclass(frozen=True)
class ArtifactResult:
    """One artifact's entry: its status (one of :data:`STATUSES`) and, once compared, the file and its sha256 (what a
    shipping stage checks), the config section of its tolerances, the contract check and every output.

    ``passed`` is None for a skipped artifact: neither a pass nor a failure of the gate.
    """

    status: str
    passed: Optional[bool] = None
    reason: Optional[str] = None  # why it was skipped or could not run
    file: Optional[str] = None
    sha256: Optional[str] = None
    config_key: Optional[str] = None  # parity.<section> whose tolerances judged it
    contract: Optional[ContractCheck] = None
    outputs: Optional[dict[str, OutputResult]] = None  # None: never compared (skipped, or could not run)
    precision: Optional[str] = None  # an engine's: the precision of the ONNX it was built from

    def to_json(self) -> dict[str, Any]:
        return with_optional(
            {},
            file=self.file,
            sha256=self.sha256,
            config_key=self.config_key,
            status=self.status,
            passed=self.passed,
            reason=self.reason,
            contract={"passed": self.contract.passed, "problems": list(self.contract.problems)} if self.contract else None,
            outputs={n: o.to_json() for n, o in self.outputs.items()} if self.outputs is not None else None,
            precision=self.precision,
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ArtifactResult:
        if d["status"] not in STATUSES:
            raise ValueError(f"status {d['status']!r} is not one of {list(STATUSES)}")
        c = d.get("contract")
        return cls(
            status=str(d["status"]),
            passed=d.get("passed"),
            reason=d.get("reason"),
            file=d.get("file"),
            sha256=d.get("sha256"),
            config_key=d.get("config_key"),
            contract=ContractCheck(bool(c["passed"]), [str(p) for p in c.get("problems") or []]) if c else None,
            outputs={str(n): OutputResult.from_json(o) for n, o in d["outputs"].items()} if d.get("outputs") is not None else None,
            precision=d.get("precision"),
        )

    def failed_outputs(self) -> list[str]:
        """The outputs that did not pass."""
        return [n for n, o in (self.outputs or {}).items() if not o.passed]


@dataclass(frozen=True)
class Reference:
    """What every artifact was judged against: the reference's source, the samples and how they were chosen (held out
    of calibration, or synthetic), the goldens' files, the reference's I/O contract and how its rows cover each output."""

    source: str  # torch | onnx | goldens
    samples: Optional[int] = None
    split: Optional[str] = None
    rows: Optional[int] = None
    sha256: Optional[str] = None
    batch_sizes: list[int] = field(default_factory=list)
    inputs: Optional[str] = None  # the golden inputs file (what ``release build`` ships for the canary)
    outputs: Optional[str] = None
    contract: dict[str, Any] = field(default_factory=dict)  # pipeline.parity.contract.Contract as JSON: {inputs|outputs: {name: {dtype, rank}}}
    coverage: dict[str, Coverage] = field(default_factory=dict)
    rows_available: Optional[int] = None  # real samples: rows before the split
    calibration_rows_left_out: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        head = {"source": self.source, "samples": self.samples, "split": self.split}
        head = with_optional(head, rows_available=self.rows_available, calibration_rows_left_out=self.calibration_rows_left_out)
        return head | {
            "rows": self.rows,
            "sha256": self.sha256,
            "batch_sizes": list(self.batch_sizes),
            "inputs": self.inputs,
            "outputs": self.outputs,
            "contract": self.contract,
            "coverage": {n: c.to_json() for n, c in self.coverage.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Reference:
        return cls(
            source=str(d["source"]),
            samples=d.get("samples"),
            split=d.get("split"),
            rows=d.get("rows"),
            sha256=d.get("sha256"),
            batch_sizes=[int(b) for b in d.get("batch_sizes") or []],
            inputs=d.get("inputs"),
            outputs=d.get("outputs"),
            contract=dict(d.get("contract") or {}),
            coverage={str(n): Coverage.from_json(c) for n, c in (d.get("coverage") or {}).items()},
            rows_available=d.get("rows_available"),
            calibration_rows_left_out=d.get("calibration_rows_left_out"),
        )


@dataclass(frozen=True)
class TextParity:
    """The text endpoint's parity (pipeline/parity/text.py): the batched, padded computation against each row alone."""

    tokenizer_sha256: str
    passed: bool
    max_abs: float
    atol: float
    rows: int
    cases: list[str] = field(default_factory=list)
    longest_tokens: int = 0
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "tokenizer_sha256": self.tokenizer_sha256,
            "passed": self.passed,
            "max_abs": self.max_abs,
            "atol": self.atol,
            "rows": self.rows,
            "cases": list(self.cases),
            "longest_tokens": self.longest_tokens,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TextParity:
        return cls(
            str(d["tokenizer_sha256"]),
            bool(d["passed"]),
            float(d["max_abs"]),
            float(d["atol"]),
            int(d["rows"]),
            [str(c) for c in d.get("cases") or []],
            int(d.get("longest_tokens") or 0),
            str(d.get("reason") or ""),
        )


@dataclass(frozen=True)
class ParityReport:
    """The whole report. ``gating`` lists the artifacts whose failure fails the stage (None: every one, in a report
    that does not say); ``not_gating`` says why each other one does not."""

    artifacts: dict[str, ArtifactResult]
    model: Optional[str] = None
    passed: bool = False
    reference: Optional[Reference] = None  # None: a report that names no reference (merged, or written by hand)
    gating: Optional[list[str]] = None
    not_gating: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: Optional[float] = None
    schema: int = SCHEMA_VERSION
    text_endpoint: Optional[TextParity] = None  # None: the model has no tokenizer, so no text endpoint

    def to_json(self) -> dict[str, Any]:
        d = with_optional({"schema": self.schema}, model=self.model) | with_optional({"passed": self.passed}, gating=self.gating)
        d = with_optional(d | {"not_gating": dict(self.not_gating)}, reference=self.reference.to_json() if self.reference else None)
        d = with_optional(d | {"artifacts": {k: a.to_json() for k, a in self.artifacts.items()}, "notes": list(self.notes)}, seconds=self.seconds)
        return with_optional(d, text_endpoint=self.text_endpoint.to_json() if self.text_endpoint else None)

    @classmethod
    def from_json(cls, data: object, origin: str = "parity report") -> ParityReport:
        """Parse a parity report; raise ParityError when it is not one (another schema, a missing or malformed key)."""
        schema = data.get("schema") if isinstance(data, dict) else None
        if not isinstance(data, dict) or schema != SCHEMA_VERSION:
            raise ParityError(f"{origin} has an unknown format", details={"schema": schema}, fix=_FIX)
        try:
            return cls(
                artifacts={str(k): ArtifactResult.from_json(a) for k, a in data["artifacts"].items()},
                model=None if data.get("model") is None else str(data["model"]),
                passed=bool(data.get("passed", False)),
                reference=Reference.from_json(data["reference"]) if data.get("reference") else None,
                gating=None if data.get("gating") is None else [str(k) for k in data["gating"]],
                not_gating={str(k): str(v) for k, v in (data.get("not_gating") or {}).items()},
                notes=[str(n) for n in data.get("notes") or []],
                seconds=number(data.get("seconds")),
                text_endpoint=TextParity.from_json(data["text_endpoint"]) if data.get("text_endpoint") else None,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ParityError(f"{origin} is not a parity report", details={"error": f"{type(e).__name__}: {e}"}, fix=_FIX) from None

    def verdict(self, kind: str) -> tuple[bool, str]:
        """Whether ``kind`` ("fp32", "fp16", "trt@<target>"; "trt:<target>" is accepted) passed parity, and why not.

        Missing, skipped, errored or failed all count as not passed: a stage that ships an artifact
        must refuse unless this returns True.
        """
        kind = kind.replace(":", "@")
        art = self.artifacts.get(kind)
        if art is None:
            return False, f"'{kind}' is not in the parity report (kinds there: {sorted(self.artifacts)})"
        if art.status == "passed" and art.passed is True:
            return True, "passed"
        if art.status in ("skipped", "error"):
            return False, f"parity {art.status}: {art.reason}"
        if art.status == "inconclusive":
            why = [r for o in (art.outputs or {}).values() for r in o.coverage_reasons()]
            return False, f"parity inconclusive: the reference rows cannot judge it ({'; '.join(why)})"
        if art.contract is not None and not art.contract.passed:
            return False, f"parity failed: I/O contract broken ({'; '.join(art.contract.problems or ['see outputs'])})"
        return False, f"parity failed for outputs {art.failed_outputs()}"

    def gating_kinds(self) -> set[str] | None:
        """The artifact kinds whose failure fails the stage (None: every one, for reports that do not say)."""
        return None if self.gating is None else set(self.gating)


def read_report(path: Path | str) -> ParityReport:
    """Read a parity.json; raise ParityError if it is missing, unreadable or not a parity report."""
    p = Path(path)
    return ParityReport.from_json(read_json(p, ParityError, "parity report", "run the parity stage first (dvc repro parity)"), f"parity report {p}")
