"""Measure live promotion and rollback on the real model, under a perf_analyzer load.

    python scripts/measure_release_reload.py [--repository artifacts/model_repository/minilm] [--requests 1200]

The CPU tritonserver from nvidia-pytriton has no onnxruntime backend, so the shipped ONNX
file is served by the python-backend ONNX Runtime model (pipeline/serving/python_standin.py)
with the shipped scheduling config and model_warmup (its rows copied from the shipped
warmup/), exactly as the bench does. Two releases of that repository are built in a
temporary store; version 1 is served; then, while perf_analyzer sends real tokenized inputs
at concurrency 2, version 2 is promoted live and rolled back live. Prints the wall times, the
failed-request count (perf_analyzer stops with "had error" on the first failed request) and
the inferences Triton counted when it loaded version 1 from the environment, before any
request, against what its model_warmup runs. Also times store-only promote/rollback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.serving.embedded import MODEL_PY, VERSION_LOCAL_STANDIN, read_config, to_python_backend, write_config  # noqa: E402
from pipeline.serving.perf_analyzer import locate_perf_analyzer, write_input_data  # noqa: E402
from pipeline.serving.install import site_packages  # noqa: E402
from pipeline.serving.process import EmbeddedServer  # noqa: E402
from pipeline.release.build import BuildInputs, build_release  # noqa: E402
from pipeline.release.promote import promote, rollback  # noqa: E402
from pipeline.release.store.store import ReleaseStore  # noqa: E402
from pipeline.repository.warmup import WARMUP_DIR  # noqa: E402


def serving_repository(shipped: Path, out: Path, marker: str = "") -> Path:
    """``out/<name>/`` serving the shipped ONNX through the python backend, scheduling and model_warmup unchanged.

    ``marker`` changes model.py's bytes, so two builds of one shipped model are two releases.
    """
    name = read_config(shipped / "config.pbtxt").name or shipped.name
    d = out / name
    (d / "1").mkdir(parents=True)
    (d / "configs").mkdir()
    version = next(p for p in shipped.iterdir() if p.is_dir() and p.name.isdigit())
    shutil.copy2(version / "model.onnx", d / "1/model.onnx")
    shutil.copy2(MODEL_PY, d / "1/python_standin.py")
    (d / "1/model.py").write_text(VERSION_LOCAL_STANDIN + (f"# {marker}\n" if marker else ""))
    (d / "1/sys_path.json").write_text(json.dumps([str(p) for p in site_packages()]))
    if (shipped / WARMUP_DIR).is_dir():  # the rows the configs' model_warmup names
        shutil.copytree(shipped / WARMUP_DIR, d / WARMUP_DIR)
    for src, dst in [(p, d / "configs" / p.name) for p in sorted((shipped / "configs").glob("*.pbtxt"))] + [(shipped / "config.pbtxt", d / "config.pbtxt")]:
        cfg, _ = to_python_backend(read_config(src), Path("unused"))
        del cfg.parameters["onnx_path"]  # the stand-in reads its own version's model.onnx
        write_config(dst, cfg)
    return out


def warmed(url: str, model: str) -> dict[str, int]:
    """Inferences per loaded version that Triton counted (the warmup's, when nothing else was sent since the load)."""
    import tritonclient.http as th

    stats = th.InferenceServerClient(url).get_inference_statistics(model)["model_stats"]
    return {s["version"]: int(s["inference_count"]) for s in stats}


def parity_for(onnx: Path, out: Path) -> Path:
    """A parity report in the parity stage's format whose fp32 entry passed for exactly ``onnx``."""
    from pipeline.core.atomic import file_digest

    entry = {"file": str(onnx), "sha256": file_digest(onnx)[0], "status": "passed", "passed": True, "outputs": {}}
    out.write_text(json.dumps({"schema": 1, "passed": True, "artifacts": {"fp32": entry}}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repository", type=Path, default=Path("artifacts/model_repository/minilm"))
    ap.add_argument("--requests", type=int, default=1200)
    args = ap.parse_args()
    from pipeline.models.minilm import sample_inputs

    with tempfile.TemporaryDirectory(prefix="release-reload-") as tmp:
        root = Path(tmp)
        lock = root / "dvc.lock"
        lock.write_text("stages: {}\n")
        store = ReleaseStore(root / "store")
        for i in (1, 2):
            repo = serving_repository(args.repository, root / f"repo{i}", f"build {i}")
            # Both wrap the same shipped model.onnx; a release needs a parity entry for its sha256
            # (this is a timing run of copies, not a release of the pipeline's output).
            parity = parity_for(next(repo.glob("*/1/model.onnx")), root / "parity.json")
            build_release(store, BuildInputs(repo, parity, None, lock, git_cwd=root), unchecked_evidence=True, tag=False)
        model = store.models()[0]
        promote(store, "dev", version=1)
        data = write_input_data(root / "input.json", sample_inputs(), batched=True)
        pa = locate_perf_analyzer()
        with EmbeddedServer(store.env_repository("dev"), model, timeout_s=300, log_dir=root / "logs") as srv:
            cfg = store.release_config(model, 1, None)[0]
            print(
                f"loaded from the environment, before any request: inferences per version {warmed(srv.http_url, model)}; "
                f"its model_warmup runs {sum(w.batch_size * w.count for w in cfg.model_warmup)}"
            )
            cmd = [str(pa.binary), "-m", model, "-u", srv.http_url, "-i", "http", "--concurrency-range", "2", "--request-count", str(args.requests), "--input-data", str(data)]
            load = subprocess.Popen(cmd, env=pa.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                import time

                time.sleep(3)
                up = promote(store, "dev", version=2, reload_url=srv.http_url)
                time.sleep(1)
                down = rollback(store, "dev", reload_url=srv.http_url)
                covered = load.poll() is None
                out, _ = load.communicate(timeout=1800)
            finally:
                if load.poll() is None:
                    load.kill()
        failed = "had error" in out or load.returncode != 0
        print(f"live promote 1->2 under load: {up.timings['total_s']:.2f} s  {_fmt(up.timings)}")
        print(f"live rollback 2->1 under load: {down.timings['total_s']:.2f} s  {_fmt(down.timings)}")
        print(f"perf_analyzer: exit {load.returncode}, {'FAILED requests' if failed else '0 failed requests'}, load covered both switches: {covered}")
        print("\n".join(ln for ln in out.splitlines() if "Request count" in ln or "Throughput" in ln or "p99" in ln or "error" in ln))
        a = promote(store, "staging", version=1)
        b = promote(store, "staging", version=2)
        c = rollback(store, "staging")
        print(f"store-only: first promote {a.timings['total_s']:.2f} s, promote {b.timings['total_s']:.2f} s, rollback {c.timings['total_s']:.2f} s")
        return 0 if not failed and covered else 1


def _fmt(t: dict[str, float]) -> str:
    return "(" + ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in t.items() if k != "total_s") + ")"


if __name__ == "__main__":
    sys.exit(main())
