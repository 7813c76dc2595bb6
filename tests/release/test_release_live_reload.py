"""Live promotion and rollback on a real tritonserver under a real perf_analyzer load.

The store holds a tiny python-backend model (the pytriton server has no onnxruntime
backend) that answers ``x + version``, so the test sees which version served. A
negative control shows the same load *does* report failures when a model disappears
without a handover, so "zero failed requests" is a measurement, not a blind spot.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as th

from pipeline.serving.perf_analyzer import locate_perf_analyzer
from pipeline.serving.process import EmbeddedServer
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.promote import promote, rollback
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import dvc_lock, parity_report, tiny_repository

REQUESTS = 30000  # at 1-4k req/s on 2 shared cores this spans promotion and rollback (asserted below)


def served_version(client: th.InferenceServerClient) -> tuple[str, float]:
    x = th.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.zeros((1, 4), np.float32))
    r = client.infer("tiny", [x])
    return r.get_response()["model_version"], float(r.as_numpy("y")[0, 0])


def successes(client: th.InferenceServerClient) -> int:
    stats = client.get_inference_statistics("tiny")["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


def start_load(pa, url: str, csv: Path) -> subprocess.Popen[str]:  # noqa: ANN001 - PerfAnalyzer
    cmd = [str(pa.binary), "-m", "tiny", "-u", url, "-i", "http", "--concurrency-range", "2", "--request-count", str(REQUESTS), "--shape", "x:4", "-f", str(csv)]
    return subprocess.Popen(cmd, env=pa.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_traffic(client: th.InferenceServerClient, proc: subprocess.Popen[str], n: int = 200) -> None:
    deadline = time.monotonic() + 60
    while successes(client) < n:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "perf_analyzer sent no traffic"
        time.sleep(0.05)


@pytest.mark.triton
@pytest.mark.timeout(600)
def test_promote_and_rollback_live_with_zero_failed_requests(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path / "store")
    parity, lock = parity_report(tmp_path / "parity.json"), dvc_lock(tmp_path / "dvc.lock")
    for i, marker in ((1, ""), (2, "v2")):
        build_release(store, BuildInputs(tiny_repository(tmp_path / f"repo{i}", marker=marker), parity, None, lock, git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    promote(store, "dev", version=1)
    pa = locate_perf_analyzer()

    with EmbeddedServer(store.env_repository("dev"), "tiny", timeout_s=120, log_dir=tmp_path / "logs") as srv:
        client = th.InferenceServerClient(srv.http_url)
        assert served_version(client) == ("1", 1.0)
        load = start_load(pa, srv.http_url, tmp_path / "load.csv")
        try:
            wait_for_traffic(client, load)
            up = promote(store, "dev", version=2, reload_url=srv.http_url)
            assert served_version(client) == ("2", 2.0)
            assert not client.is_model_ready("tiny", "1")
            time.sleep(0.5)
            down = rollback(store, "dev", reload_url=srv.http_url)
            assert served_version(client) == ("1", 1.0)
            still_running = load.poll() is None
            out, _ = load.communicate(timeout=300)
        finally:
            if load.poll() is None:
                load.kill()
        assert still_running, f"perf_analyzer finished before the rollback did; raise REQUESTS above {REQUESTS}"
        assert load.returncode == 0 and "had error" not in out, out[-2000:]
        assert f"Request count: {REQUESTS}" in out  # every request of the run answered
        print(f"\npromote with reload: {up.timings}\nrollback with reload: {down.timings}\nfailed requests: 0 of {REQUESTS}")
        # The python-backend stub wrote __pycache__ into version 1 while it served; the rollback
        # removed it before the strict check instead of replacing or ignoring it.
        assert down.copy == "present"
        # The store agrees with the server, and nothing was deleted.
        assert store.env_state("dev", "tiny").live == 1 and store.env_state("dev", "tiny").present == [1, 2]

        # Negative control: unloading without a handover makes the same load report failures.
        control = start_load(pa, srv.http_url, tmp_path / "control.csv")
        try:
            wait_for_traffic(client, control, n=successes(client) + 200)
            client.unload_model("tiny")
            out, _ = control.communicate(timeout=120)
        finally:
            if control.poll() is None:
                control.kill()
        assert control.returncode != 0 and "had error" in out, out[-2000:]


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_reload_failure_leaves_pointer_and_server_unchanged(tmp_path: Path) -> None:
    """A version Triton cannot load is never flipped to; the old one keeps serving."""
    store = ReleaseStore(tmp_path / "store")
    parity, lock = parity_report(tmp_path / "parity.json"), dvc_lock(tmp_path / "dvc.lock")
    build_release(store, BuildInputs(tiny_repository(tmp_path / "ok"), parity, None, lock, git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    broken = tiny_repository(tmp_path / "broken")
    (broken / "tiny/1/model.py").write_text("raise RuntimeError('this model cannot initialize')\n")
    build_release(store, BuildInputs(broken, parity, None, lock, git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    promote(store, "dev", version=1)
    with EmbeddedServer(store.env_repository("dev"), "tiny", timeout_s=120, log_dir=tmp_path / "logs") as srv:
        client = th.InferenceServerClient(srv.http_url)
        from pipeline.core.errors import ReleaseError

        with pytest.raises(ReleaseError, match="Triton could not load version 2") as e:
            promote(store, "dev", version=2, reload_url=srv.http_url)
        assert "pointer was not changed" in e.value.render()
        assert store.env_state("dev", "tiny").live == 1
        assert served_version(client) == ("1", 1.0)
