"""The pipeline's outputs, as a fingerprint: a restructuring must leave it unchanged.

    python scripts/check_outputs.py snapshot artifacts > after.json
    python scripts/check_outputs.py compare scripts/baselines/minilm_outputs.json after.json

A snapshot holds, for every file under the artifacts folder:
- a JSON file (reports, metrics, manifests): the set of its key paths (list items folded into `[]`), since its values
  carry timings and timestamps that differ on every run while its shape must not;
- a measurement's text (report.md, a curve's CSV): its shape only, the markdown headings or the CSV header, since its
  numbers are the machine's;
- every other file (ONNX models, config.pbtxt, warmup data): its sha256, since those bytes are what ships.
PNG plots, perf_analyzer's raw logs (one per adaptive round: their count is the machine's too) and DVC's own
bookkeeping are left out.
`compare` prints every file added, removed or changed, and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

SKIP_SUFFIXES = (".png", ".svg", ".gitignore", ".lock")
# Files whose bytes depend on the machine's mood, not on the code: the timing cache is a TensorRT/ORT tactic cache.
SKIP_PARTS = ("timing_cache", "logs")


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path in a JSON value: {'a': [{'b': 1}]} -> {'a', 'a[]', 'a[].b'}."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            paths.add(path)
            paths |= key_paths(item, path)
    elif isinstance(value, list):
        for item in value:
            paths.add(f"{prefix}[]")
            paths |= key_paths(item, f"{prefix}[]")
    return paths


def snapshot(root: Path) -> dict[str, Any]:
    """The fingerprint of every output file under root, keyed by its path relative to root."""
    files: dict[str, Any] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if path.name.endswith(SKIP_SUFFIXES) or any(part in SKIP_PARTS for part in path.parts):
            continue
        if path.suffix == ".json":
            files[rel] = {"keys": sorted(key_paths(json.loads(path.read_text())))}
        elif path.suffix == ".md":
            files[rel] = {"keys": [ln for ln in path.read_text().splitlines() if ln.startswith("#")]}
        elif path.suffix == ".csv":
            files[rel] = {"keys": path.read_text().splitlines()[:1]}
        else:
            files[rel] = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {"root": root.name, "files": files}


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per file that was added, removed, or whose bytes or keys changed."""
    lines: list[str] = []
    old, new = before["files"], after["files"]
    for rel in sorted(old.keys() - new.keys()):
        lines.append(f"removed: {rel}")
    for rel in sorted(new.keys() - old.keys()):
        lines.append(f"added: {rel}")
    for rel in sorted(old.keys() & new.keys()):
        a, b = old[rel], new[rel]
        if "keys" in a and "keys" in b:
            gone, extra = sorted(set(a["keys"]) - set(b["keys"])), sorted(set(b["keys"]) - set(a["keys"]))
            if gone or extra:
                lines.append(f"keys changed: {rel}: lost {gone}, gained {extra}")
        elif a != b:
            lines.append(f"bytes changed: {rel}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="print the fingerprint of an artifacts folder")
    snap.add_argument("root", type=Path)
    comp = sub.add_parser("compare", help="compare two fingerprints (or a fingerprint and an artifacts folder)")
    comp.add_argument("before", type=Path)
    comp.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "snapshot":
        json.dump(snapshot(args.root), sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    loaded = [snapshot(p) if p.is_dir() else json.loads(p.read_text()) for p in (args.before, args.after)]
    lines = differences(*loaded)
    for line in lines:
        print(line)
    print(f"{len(loaded[1]['files'])} files compared: {'same outputs' if not lines else f'{len(lines)} differences'}")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
