"""Measure the release store on S3 against a local one, on the real model.

    python scripts/measure_store.py --endpoint http://127.0.0.1:PORT --bucket NAME \
        [--repository artifacts/model_repository/minilm] [--repeats 3]

AWS_* credentials come from the environment (any S3-API server: moto, MinIO, AWS). For each store
(a local directory, then ``s3://<endpoint>/<bucket>/<prefix>``) it builds two releases of the shipped
model (served by the python-backend stand-in, as scripts/measure_release_reload.py does, because the
CPU tritonserver has no onnxruntime backend), promotes version 1 through every environment, promotes 2
and rolls back, each timed; then it starts tritonserver on the store's production environment in
explicit model-control mode and times server start to ready and the load request to ready. Prints one
table; every number is the median of ``--repeats`` runs with the range beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure_release_reload import parity_for, serving_repository  # noqa: E402

from pipeline.release.build import BuildInputs, build_release  # noqa: E402
from pipeline.release.promote import promote, rollback  # noqa: E402
from pipeline.release.store.store import ReleaseStore  # noqa: E402
from pipeline.serving.client import TritonClient  # noqa: E402
from pipeline.serving.process import EmbeddedServer  # noqa: E402


class StoreServer(EmbeddedServer):
    """The embedded tritonserver reading a repository URL (a path or s3://http://host:port/...) itself."""

    def __init__(self, repository: str, model: str, **kwargs: object) -> None:
        super().__init__(".", model, **kwargs)  # type: ignore[arg-type]
        self.repo_dir = repository  # type: ignore[assignment]


def one_store(url: str, repos: list[Path], parity: Path, lock: Path, root: Path) -> dict[str, float]:
    """Build, promote through every environment, promote again and roll back; then serve production."""
    store = ReleaseStore(url)
    t: dict[str, float] = {}
    for i, repo in enumerate(repos, 1):
        s = time.perf_counter()
        build_release(store, BuildInputs(repo, parity, None, lock, git_cwd=root), unchecked_evidence=True, tag=False)
        t[f"build v{i}"] = time.perf_counter() - s
    for env in ("dev", "staging", "production"):
        s = time.perf_counter()
        promote(store, env, version=1)
        t[f"promote v1 -> {env}"] = time.perf_counter() - s
    s = time.perf_counter()
    promote(store, "production", version=2)
    t["promote v2 -> production"] = time.perf_counter() - s
    s = time.perf_counter()
    rollback(store, "production")
    t["rollback production"] = time.perf_counter() - s
    model = store.models()[0]
    repository = store.env_repository("production")
    s = time.perf_counter()
    with StoreServer(repository, model, timeout_s=300, log_dir=root / f"logs-{uuid.uuid4().hex[:6]}") as srv:
        t["server start -> model ready"] = time.perf_counter() - s
        client = TritonClient(srv.http_url)
        client.unload(model)
        time.sleep(2)  # unloading finishes in the background; time a load of a model that is gone
        s = time.perf_counter()
        client.load(model)
        t["load request -> ready"] = time.perf_counter() - s
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True, help="S3 endpoint, e.g. http://127.0.0.1:9000")
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--repository", type=Path, default=Path("artifacts/model_repository/minilm"))
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rows: dict[str, dict[str, list[float]]] = {"local": {}, "s3": {}}
    with tempfile.TemporaryDirectory(prefix="measure-store-") as tmp:
        root = Path(tmp)
        lock = root / "dvc.lock"
        lock.write_text("stages: {}\n")
        repos = [serving_repository(a.repository, root / f"repo{i}", f"build {i}") for i in (1, 2)]
        parity = parity_for(next(repos[0].glob("*/1/model.onnx")), root / "parity.json")
        for r in range(a.repeats):
            for kind, url in (("local", str(root / f"store{r}")), ("s3", f"s3://{a.endpoint}/{a.bucket}/run{r}-{uuid.uuid4().hex[:6]}")):
                for k, v in one_store(url, repos, parity, lock, root).items():
                    rows[kind].setdefault(k, []).append(v)
    print(f"{'step':32} {'local (median, range) s':>28} {'S3 (median, range) s':>28}")
    for k in rows["local"]:
        cells = []
        for kind in ("local", "s3"):
            v = rows[kind][k]
            cells.append(f"{statistics.median(v):8.3f} ({min(v):.3f}-{max(v):.3f})")
        print(f"{k:32} {cells[0]:>28} {cells[1]:>28}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
