"""What the parity and bench reports say about the exact files a release ships.

A report vouches for a release only through sha256. The parity stage records the sha256 of
every artifact it compared; the bench records the sha256 of the served ``model.onnx``, of the
ONNX file each variant served and of each config variant it measured. A parity report written for other files (another
model, an older run) refuses the build; a bench report for other files is recorded as
absent, with the reason (a release without a benchmark is still a valid release).

The manifest embeds summaries, never whole reports: parity's verdict and per artifact
its status, sha256 and worst error per output; the bench's ``summary`` and the shas it was
measured on. Parity is read through its record (:mod:`pipeline.records.parity`), the bench report through its
record (:mod:`pipeline.records.bench`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.core.atomic import file_digest
from pipeline.core.errors import BenchError, ParityError, ReleaseError
from pipeline.records.bench import BenchRecord
from pipeline.records.parity import ArtifactResult, ParityReport, read_report
from pipeline.records.release import BenchSection, ParitySection, SamplesSection, ServedFile
from pipeline.repository.text_endpoint import SUFFIX as TEXT_SUFFIX, shipped_files

ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
PLAN_SUFFIX = ".plan"
SAMPLES_FILE = "samples/inputs.json"  # inside a release's files/: the parity inputs a canary replays
_TRT = "trt@"
_PARITY_FIX = "rerun `dvc repro parity repository` so the parity report and the repository come from the same run, then build again"


def served_files(version_dir: Path) -> dict[str, tuple[str, str]]:
    """Files of a version directory that parity vouches for: name -> (sha256, "onnx" | "trt" | "tokenizer")."""
    out = {}
    for p in sorted(version_dir.iterdir()):
        # Every ONNX file: model.onnx, and model.<precision>.onnx when the two variants serve different precisions.
        if p.is_file() and p.suffix in (".onnx", PLAN_SUFFIX):
            out[p.name] = (file_digest(p)[0], "onnx" if p.suffix == ".onnx" else "trt")
        elif p.is_file() and p.name == TOKENIZER_FILE:  # the text endpoint's: parity checked it by sha256
            out[p.name] = (file_digest(p)[0], "tokenizer")
    return out


def _tokenizer_problem(report: ParityReport, sha: str) -> str | None:
    """Why parity does not vouch for a shipped tokenizer.json with ``sha`` (None: it does)."""
    text = report.text_endpoint
    if text is None:
        return f"{TOKENIZER_FILE} sha256 {sha[:12]}...: the parity report has no text endpoint verdict"
    if text.tokenizer_sha256 != sha:
        return f"{TOKENIZER_FILE} sha256 {sha[:12]}... is not the tokenizer parity checked ({text.tokenizer_sha256[:12]}...)"
    if not text.passed:
        return f"{TOKENIZER_FILE} is the text endpoint's tokenizer, and it did not pass: {text.reason}"
    return None


def parity_section(path: str | Path, version_dir: Path, outputs: list[str]) -> ParitySection:
    """The manifest's parity summary, after checking the report passed and covers every served file.

    ``outputs`` are the output names the release's config serves (they explain a mismatch).

    The release is judged on the files it ships: an artifact it does not ship (int8 on an fp32 fleet) that failed,
    errored or was skipped goes into ``not_shipped`` with its reason and blocks nothing.

    Raises:
        ReleaseError: the report is missing or not a parity report; a served file is an
        artifact that did not pass; the version directory holds no ONNX model or TensorRT
        plan; or a served file's sha256 matches no passed artifact of the report (both shas
        and the fix in the message).
    """
    try:
        report = read_report(path)
    except ParityError as e:
        raise ReleaseError(e.what, fix=(e.fix or "run `dvc repro parity`") + " (a release needs a passed parity gate)", details=e.details) from None
    arts = report.artifacts
    served = served_files(version_dir)
    if not served:
        raise ReleaseError(
            f"{version_dir} holds no {ONNX_FILE} or TensorRT plan, so the parity report cannot vouch for what it serves",
            fix="release the repository stage's output (`dvc repro repository`)",
        )
    matched: dict[str, ServedFile] = {}
    problems: list[str] = []
    for name, (sha, kind) in served.items():
        if kind == "tokenizer":
            problem = _tokenizer_problem(report, sha)
            if problem is None:
                matched[name] = ServedFile(sha, "text_endpoint")
            else:
                problems.append(problem)
            continue
        wanted = {k: a for k, a in arts.items() if k.startswith(_TRT) == (kind == "trt")}
        hits = [k for k, a in wanted.items() if a.sha256 == sha and report.verdict(k)[0]]
        if hits:
            matched[name] = ServedFile(sha, hits[0])
            continue
        same = [k for k, a in wanted.items() if a.sha256 == sha]
        if same:  # the served file itself did not pass: the parity gate, as the report states it
            problems.append(f"{name} is the {same[0]} artifact, and it did not pass: {report.verdict(same[0])[1]}")
            continue
        have = ", ".join(f"{k} {str(a.sha256 or 'no sha256')[:12]} ({a.status})" for k, a in wanted.items()) or "none"
        problems.append(f"{name} sha256 {sha[:12]}... matches no passed {'ONNX' if kind == 'onnx' else 'TensorRT'} artifact of the report (report: {have})")
    if any(" did not pass: " in p for p in problems):
        raise ReleaseError(
            "parity failed for a file this release ships: refusing to build it",
            fix="run the parity stage (`dvc repro parity`) and fix what it reports before building a release",
            details={"report": path, "files": "\n    " + "\n    ".join(problems)},
        )
    if problems:
        compared = sorted({o for k, a in arts.items() if not k.startswith(_TRT) for o in (a.outputs or {})})
        details: dict[str, object] = {"report": path, "files": "\n    " + "\n    ".join(problems)}
        if compared and outputs and compared != sorted(outputs):
            details["outputs"] = f"parity compared {compared}, the release serves {sorted(outputs)}"
        if report.model:
            details["report's model"] = report.model
        raise ReleaseError(f"the parity report does not vouch for the files this release ships ({version_dir})", fix=_PARITY_FIX, details=details)
    shipped = {m.artifact for m in matched.values()}
    # Judged only on what it ships: every other artifact that did not pass is recorded with its reason, never fatal.
    optional = {k: report.verdict(k)[1] for k in arts if k not in shipped and not report.verdict(k)[0]}
    return ParitySection(True, str(path), matched, optional, {k: _artifact_summary(a) for k, a in arts.items()})


def parity_samples(path: str | Path) -> tuple[Path | None, SamplesSection]:
    """The real inputs parity compared on (its report names the file), to ship for ``release canary`` to replay.

    Returns the file (None when there is none to ship) and the manifest's ``samples`` section.
    """
    try:
        ref = read_report(path).reference
        named = ref.inputs if ref else None
    except ParityError as e:
        return None, SamplesSection.absent(e.what)
    if not named:
        return None, SamplesSection.absent(f"the parity report {path} names no inputs file")
    p = Path(named)
    if not p.is_file():
        return None, SamplesSection.absent(f"the parity inputs {p} are missing (run `dvc repro parity`, or `dvc pull` its outputs)")
    return p, SamplesSection("shipped", file=SAMPLES_FILE, from_=str(p), sha256=file_digest(p)[0])


def _artifact_summary(entry: ArtifactResult) -> dict[str, Any]:
    """One artifact's verdict, status, sha256 and worst absolute error per output (what a reviewer wants)."""
    out: dict[str, Any] = {"pass": entry.passed, "status": entry.status}
    if entry.sha256 is not None:
        out["sha256"] = entry.sha256
    if entry.outputs is not None:
        out["outputs"] = {k: {"max_abs": v.max_abs, "atol": v.atol} for k, v in entry.outputs.items()}
    return out


def bench_section(path: str | Path | None, model: str, model_dir: Path, version_dir: Path) -> BenchSection:
    """The bench summary if the report measured exactly these files, else ``{"status": "absent", "reason": ...}``.

    Never raises for a report that does not fit: a release does not need a benchmark.
    """
    if path is None or not Path(path).is_file():
        return BenchSection.absent(f"no bench report at {path}" if path else "no bench report given")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return BenchSection.absent(f"{path} is not readable JSON ({e})")
    try:
        record = BenchRecord.from_json(data)
    except BenchError as e:
        return BenchSection.absent(f"{path}: {e.what}")
    measured = record.model
    if model == measured.name + TEXT_SUFFIX:
        return _text_section(data, path, model, model_dir, version_dir, measured.sha256)
    if measured.name != model:
        return BenchSection.absent(f"{path} measured model '{measured.name}', not '{model}'")
    onnx = version_dir / ONNX_FILE
    if not onnx.is_file():
        return BenchSection.absent(f"the release has no {ONNX_FILE} (the bench measures the ONNX Runtime model)")
    sha = file_digest(onnx)[0]
    if measured.sha256 != sha:
        return BenchSection.absent(f"{path} measured a model.onnx with sha256 {str(measured.sha256)[:12]}..., the release ships {sha[:12]}...")
    shipped = {file_digest(p)[0] for p in version_dir.glob("*.onnx")}
    per_variant = measured.files_sha256
    if per_variant is not None and set(per_variant.values()) != shipped:
        return BenchSection.absent(
            f"{path} measured the variants on other ONNX files than the release ships "
            f"(measured {sorted(v[:12] for v in per_variant.values())}, shipped {sorted(s[:12] for s in shipped)})"
        )
    configs = {p.stem: file_digest(p)[0] for p in sorted((model_dir / "configs").glob("*.pbtxt"))}
    if measured.configs_sha256 != configs:
        theirs = measured.configs_sha256 or {}
        diff = sorted(k for k in configs.keys() | theirs.keys() if configs.get(k) != theirs.get(k))
        return BenchSection.absent(f"{path} measured other config variants than the release ships (differ: {', '.join(diff)})")
    default = model_dir / "config.pbtxt"  # what an environment serves without --variant: it must be a measured variant
    if default.is_file() and file_digest(default)[0] not in configs.values():
        return BenchSection.absent(f"{path} measured no config equal to the release's config.pbtxt (edited after the bench?)")
    if record.summary is None:
        return BenchSection.absent(f"{path} has no summary to record (rerun `dvc repro bench`)")
    return BenchSection("measured", report=str(path), model_sha256=sha, configs_sha256=configs, summary=record.summary)


def _text_section(data: dict[str, Any], path: str | Path, model: str, model_dir: Path, version_dir: Path, tensor_sha: str | None) -> BenchSection:
    """The text endpoint's bench summary for a release of ``<model>_text``: only if the bench measured exactly its files
    (model.py, tokenizer.json, every config). ``model_sha256`` is then the tensor model's ONNX file the endpoint called."""
    text = data.get("text_endpoint")
    if not isinstance(text, dict) or text.get("model") != model:
        return BenchSection.absent(f"{path} did not measure the text endpoint '{model}' (bench.text.enabled, and --sentences)")
    measured, shipped = text.get("files") or {}, shipped_files(model_dir, version_dir.name)
    if measured != shipped:
        diff = sorted(k for k in measured.keys() | shipped.keys() if measured.get(k) != shipped.get(k))
        return BenchSection.absent(f"{path} measured other files of '{model}' than the release ships (differ: {', '.join(diff)})")
    summary = (data.get("summary") or {}).get("text_endpoint")
    if not isinstance(summary, dict):
        return BenchSection.absent(f"{path} has no text-endpoint summary to record (rerun `dvc repro bench`)")
    configs = {k.removeprefix("configs/").removesuffix(".pbtxt"): v for k, v in shipped.items() if k.startswith("configs/")}
    return BenchSection("measured", report=str(path), model_sha256=tensor_sha, configs_sha256=configs, summary=summary)
