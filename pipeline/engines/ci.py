"""CI helpers for the per-GPU-family engine jobs and the assemble job (.github/workflows/engines.yml).

Each GPU runner runs ``dvc repro engine@<T>`` and ``dvc push``es the engine; DVC's
remote is content-addressed, so the bytes arrive, but the hash that names them lives
in that runner's ``dvc.lock``. The runner uploads its lock file; the assemble job
merges each runner's ``engine@<T>`` entry into its own lock (:func:`merge_locks`),
then ``dvc pull``s exactly those engines, writes the repository and prints the table
of which targets are present (:func:`targets_table`).

    python -m pipeline.engines.ci merge-locks --into dvc.lock a100=locks/a100/dvc.lock h100=locks/h100/dvc.lock
    python -m pipeline.engines.ci merge-parity --into artifacts/reports/parity.json a100=reports/a100/parity.json
    python -m pipeline.engines.ci table --params params.yaml --engines artifacts/engines >> "$GITHUB_STEP_SUMMARY"
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from pipeline import exit_with
from pipeline.core.atomic import write_json, write_text
from pipeline.core.config import load_config
from pipeline.core.errors import PipelineError, ToolError, print_error
from pipeline.engines.manifest import engine_dirs_for, targets_table
from pipeline.records.parity import read_report


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ToolError(f"cannot read lock file {path}", fix="upload dvc.lock from the GPU job", details={"error": e}) from None
    if not isinstance(data, dict):
        raise ToolError(f"{path} is not a dvc.lock mapping", fix="upload dvc.lock from the GPU job")
    return data


def merge_locks(into: Path, per_target: Mapping[str, Path]) -> list[str]:
    """Copy each runner's ``engine@<target>`` entry into the lock file ``into``; return the stages merged."""
    base: dict[str, Any] = _load_yaml(into) if into.is_file() else {"schema": "2.0", "stages": {}}
    stages = base.setdefault("stages", {})
    merged = []
    for target, lock in per_target.items():
        key = f"engine@{target}"
        entry = (_load_yaml(lock).get("stages") or {}).get(key)
        if entry is None:
            raise ToolError(f"{lock} has no '{key}' entry", fix=f"run `dvc repro {key}` in the {target} job before uploading dvc.lock")
        stages[key] = entry
        merged.append(key)
    write_text(into, yaml.safe_dump(base, sort_keys=False))
    return merged


def merge_parity(into: Path, per_target: Mapping[str, Path]) -> list[str]:
    """Copy each runner's ``trt@<target>`` entry into the parity report ``into`` (the onnx job's, pulled first).

    Raises ParityError when ``into`` or a runner's report is missing or is not a parity report.
    """
    base = read_report(into)
    merged = {key: entry for target, path in per_target.items() for key, entry in read_report(path).artifacts.items() if key == f"trt@{target}"}
    write_json(into, replace(base, artifacts={**base.artifacts, **merged}).to_json())
    return list(merged)


def _pairs(items: Sequence[str]) -> dict[str, Path]:
    out = {}
    for it in items:
        target, sep, path = it.partition("=")
        if not sep or not target or not path:
            raise ToolError(f"'{it}' is not <target>=<path>", fix="pass e.g. a100=locks/a100/dvc.lock")
        out[target] = Path(path)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: merge-locks | merge-parity | table."""
    p = argparse.ArgumentParser(prog="python -m pipeline.engines.ci", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("merge-locks", "merge-parity"):
        s = sub.add_parser(name)
        s.add_argument("--into", required=True, type=Path)
        s.add_argument("pairs", nargs="+", help="<target>=<path>")
    t = sub.add_parser("table")
    t.add_argument("--params", default="params.yaml", type=Path)
    t.add_argument("--engines", default="artifacts/engines", type=Path)
    a = p.parse_args(argv)
    try:
        if a.cmd == "merge-locks":
            print("merged:", ", ".join(merge_locks(a.into, _pairs(a.pairs))))
        elif a.cmd == "merge-parity":
            print("merged:", ", ".join(merge_parity(a.into, _pairs(a.pairs))) or "nothing")
        else:
            cfg = load_config(a.params)
            print(targets_table(engine_dirs_for(cfg.targets, cfg.target_specs, a.engines)), end="")
    except PipelineError as e:
        return print_error(e, "ci")
    return 0


if __name__ == "__main__":
    exit_with(main)
