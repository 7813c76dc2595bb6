"""Measure ``release canary`` on the real model, between two builds, under a perf_analyzer production load.

    python scripts/measure_release_canary.py --shipped A/minilm --parity A/parity.json --shipped B/minilm --parity B/parity.json \\
        [--traffic replay|real] [--duration 60] [--share 0.1] [--load-rate 10] [--params params.yaml]

Each ``--shipped`` is the repository stage's model directory of one commit, ``--parity`` its parity report
(its ``reference.inputs`` names the real samples the release ships, resolved from the working directory).
The CPU tritonserver from nvidia-pytriton has no onnxruntime backend, so each shipped ONNX file is served by
the python-backend ONNX Runtime stand-in with the shipped scheduling config and model_warmup (as the bench and
scripts/measure_release_reload.py do: ``serving_repository`` there). Release 1 is promoted to production and
served by a real tritonserver reading ``envs/production`` from the store in explicit mode; perf_analyzer sends
unversioned requests to it at ``--load-rate`` req/s (production's stand-in) while the canary judges release 2.
Prints the canary's table, its wall time, and the production load's failed requests (perf_analyzer stops
with "had error" at the first one).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.core.config import PipelineConfig, load_config  # noqa: E402
from pipeline.release.build import BuildInputs, build_release  # noqa: E402
from pipeline.release.canary.prepare import Candidate, checked  # noqa: E402
from pipeline.release.canary.run import run_canary  # noqa: E402
from pipeline.release.canary.report import markdown  # noqa: E402
from pipeline.release.promote import SwitchOptions, promote  # noqa: E402
from pipeline.release.store.store import ReleaseStore  # noqa: E402
from pipeline.serving.perf_analyzer import locate_perf_analyzer, write_input_data  # noqa: E402
from pipeline.serving.process import EmbeddedServer  # noqa: E402
from scripts.measure_release_reload import serving_repository  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shipped", type=Path, action="append", required=True)
    ap.add_argument("--parity", type=Path, action="append", required=True)
    ap.add_argument("--traffic", default="replay")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--share", type=float, default=None)
    ap.add_argument("--request-rate", type=float, default=None, help="traffic=real: the canary's own load, req/s (release.canary.request_rate)")
    ap.add_argument("--load-rate", type=int, default=10)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    args = ap.parse_args()
    assert len(args.shipped) == len(args.parity) == 2, "give --shipped and --parity once per build (two builds)"
    cfg = load_config(args.params) if args.params.is_file() else PipelineConfig()
    canary = checked(cfg.release.canary, traffic=args.traffic, duration_s=args.duration, share=args.share, request_rate=args.request_rate)
    from pipeline.models.minilm import sample_inputs

    with tempfile.TemporaryDirectory(prefix="release-canary-") as tmp:
        root = Path(tmp)
        (root / "dvc.lock").write_text("stages: {}\n")
        store = ReleaseStore(root / "store")
        for i, (shipped, parity) in enumerate(zip(args.shipped, args.parity), 1):
            build_release(store, BuildInputs(serving_repository(shipped, root / f"repo{i}"), parity, None, root / "dvc.lock", git_cwd=root), unchecked_evidence=True, tag=False)
        model = store.models()[0]
        promote(store, "production", version=1)
        data = write_input_data(root / "input.json", sample_inputs(), batched=True)
        pa = locate_perf_analyzer()
        with EmbeddedServer(store.env_repository("production"), model, timeout_s=300, log_dir=root / "logs") as srv:
            cmd = [
                str(pa.binary),
                "-m",
                model,
                "-u",
                srv.http_url,
                "-i",
                "http",
                "--request-rate-range",
                str(args.load_rate),
                "--request-count",
                str(args.load_rate * 3600),
                "--input-data",
                str(data),
            ]
            load = subprocess.Popen(cmd, env=pa.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                time.sleep(3)
                t = time.perf_counter()
                res = run_canary(store, Candidate("production", 2), SwitchOptions.of(srv.http_url), canary, cfg.parity, metrics=f"127.0.0.1:{srv.metrics_port}", say=print)
                wall = time.perf_counter() - t
                running = load.poll() is None
            finally:
                load.kill()
                _, err = load.communicate(timeout=60)
        print()
        print(markdown(res.report))
        print(f"canary wall time: {wall:.1f} s {res.timings}")
        print(f"production load ({args.load_rate} req/s, unversioned): {'0 failed requests' if running and 'had error' not in err else 'FAILED: ' + err[-500:]}")
        report = res.report.to_json()
        prod = report["errors"]["production"]
        print(
            f"production on '{model}' v1 during the canary: {prod['answered_during_canary']} answered, {prod['failed_during_canary']} failed; "
            "the copies answered only the canary's requests"
        )
        print(json.dumps({k: report[k] for k in ("latency", "errors")}, indent=1, default=str)[:3000])
        return 0 if running and "had error" not in err else 1


if __name__ == "__main__":
    sys.exit(main())
