"""A knob added in one place, the schema, is everywhere it must be: in params.yaml, range-checked, typo-checked, typed.

The test adds a field to a copy of the project's schema (one line, as a developer would) and composes that copy as
`python -m pipeline.params` does, in a fresh process (the copy's schema is the one Hydra's ConfigStore holds there).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.project import copy_checkout

SCHEMA = "pipeline/core/config/schema_bench.py"
ANCHOR = "    alternation_ms: float = knob(150.0, gt=0)  # each burst's length\n"
NEW = "    warmup_rounds: int = knob(1, ge=0, le=10)  # the one line a new knob costs\n"

# Run in the copy: compose as `python -m pipeline.params` does, with overrides that pass, miss a range, misspell the key
# (with and without Hydra's +), then load the composed params.yaml as every stage does.
SCRIPT = """
from pipeline import params
from pipeline.core.config import load_config
for case in (["bench.rounds.warmup_rounds=11"], ["bench.rounds.warmup_roundz=2"], ["+bench.rounds.warmup_roundz=2"], []):
    print("case", case, "exit", params.main(case), flush=True)
print("params.yaml default:", load_config("params.yaml").bench.rounds.warmup_rounds, flush=True)
params.main(["bench.rounds.warmup_rounds=3"])
print("params.yaml typed:", repr(load_config("params.yaml").bench.rounds.warmup_rounds), flush=True)
"""


def test_a_knob_added_to_the_schema_is_composed_checked_and_typed(tmp_path: Path) -> None:
    copy_checkout(tmp_path, "pipeline", "conf", "hydra_plugins", "dvc.yaml")
    schema = tmp_path / SCHEMA
    text = schema.read_text(encoding="utf-8")
    assert text.count(ANCHOR) == 1
    schema.write_text(text.replace(ANCHOR, ANCHOR + NEW), encoding="utf-8")

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out

    # Range-checked at composition, with the closest valid value; params.yaml not written.
    assert "bench.rounds.warmup_rounds=11: must be in [0, 10] (closest valid: 10)" in out, out
    # Typo-checked with did-you-mean: Hydra's unknown override, and a key forced in with +.
    assert "unknown key 'bench.rounds.warmup_roundz'; did you mean 'bench.rounds.warmup_rounds'?" in out, out
    assert "bench.rounds.warmup_roundz=2: unknown key; did you mean 'bench.rounds.warmup_rounds'?" in out, out
    assert out.count("exit 2") == 3 and "case [] exit 0" in out, out
    # In params.yaml with its default, under its section, and read back as the typed field a stage gets.
    params = (tmp_path / "params.yaml").read_text(encoding="utf-8")
    assert "    alternation_ms: 150.0\n    warmup_rounds: 3\n" in params, params
    assert "params.yaml default: 1" in out and "params.yaml typed: 3" in out, out
