"""INT8's speed against how many nodes the fallback keeps FP32, on the real model: the frontier behind int8.fallback.min_margin.

    python scripts/measure_int8_frontier.py [--margins 0 0.5 0.75] [--out /tmp/frontier]

Run from a project where `dvc repro calibrate` has run (artifacts/onnx/model.fp32.onnx and
artifacts/calibration/samples.json). For each margin it runs the int8 stage's own command with
`int8.fallback.min_margin=<m>` and a fleet that serves int8 (so the search runs), then times every INT8 file against
the FP32 one in the choose stage's paired rounds (batch-1 p50 and best-batch inferences/s, in-process ONNX Runtime with
the variants' threads). Quality on the held-out rows is the parity gate's to judge; this prints the calibration-row
figures the stage's report gives.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.choose import timing as timing_mod  # noqa: E402
from pipeline.choose.decide import rows_for, settings  # noqa: E402
from pipeline.core.config import load_config  # noqa: E402
from pipeline.params import compose  # noqa: E402
from pipeline.records.int8 import read_report  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--margins", type=float, nargs="+", default=[0.0, 0.5, 0.75])
    ap.add_argument("--out", type=Path, default=Path("/tmp/int8-frontier"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    fp32 = Path("artifacts/onnx/model.fp32.onnx")
    files: dict[str, Path] = {"fp32": fp32}
    kept: dict[str, dict] = {}
    for m in a.margins:
        params = a.out / f"params-{m:g}.yaml"
        params.write_text(compose(["target_specs.cpu.precision=int8", f"int8.fallback.min_margin={m}"]), encoding="utf-8")
        onnx, report = a.out / f"model.int8.m{m:g}.onnx", a.out / f"int8.m{m:g}.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline.stages.int8",
                "--params",
                str(params),
                "--onnx",
                str(fp32),
                "--calibration",
                "artifacts/calibration/samples.json",
                "--out",
                str(onnx),
                "--report",
                str(report),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        r = read_report(report)
        name = f"margin {m:g}"
        files[name] = onnx
        kept[name] = {"kept": r.kept_fp32_count, "int8": r.quantized_count, "mb": r.size_bytes_int8 / 1e6}
    cfg = load_config(a.out / f"params-{a.margins[0]:g}.yaml")
    v = cfg.variants
    t = timing_mod.measure(files, rows_for(cfg, fp32), settings(v.latency), settings(v.throughput), v.throughput.max_batch_size, cfg.choose)
    print(f"fp32: {fp32.stat().st_size / 1e6:.1f} MB, p50 {t.median('p50_ms', 'fp32'):.2f} ms, {t.median('infer_s', 'fp32'):.0f} infer/s; {len(t.rounds)} rounds")
    print("| int8.fallback.min_margin | nodes kept FP32 | INT8 nodes | MB | batch-1 p50 speedup | best-batch infer/s speedup |")
    print("|---|---|---|---|---|---|")
    for name, k in kept.items():
        print(f"| {name.split()[1]} | {k['kept']} | {k['int8']} | {k['mb']:.1f} | {t.latency_speedup(name).text()} | {t.throughput_speedup(name).text()} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
