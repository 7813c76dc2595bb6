"""``release canary`` on a real tritonserver under a real perf_analyzer load.

The store holds the ONNX Runtime python-backend stand-in (tests/helpers/release_repo.py) serving
tests/tiny_triton.py's model; every execute sleeps 8 ms, so a latency is that sleep plus noise and a
ratio of two of them is stable on a busy machine. Each ships a model_warmup as the repository stage renders
it, so the copies, the promotion and the environment all load with their warmup rows. The releases:

    1  seed 1          the live version
    2  seed 1          identical weights: passes and is promoted
    3  seed 2          perturbed weights: fails on outputs
    4  seed 1, 40 ms   slow on purpose: fails on latency

A perf_analyzer process stands in for production traffic: unversioned requests to ``tiny`` at a fixed
rate throughout, and it must see zero failed requests (a negative control shows it does see one). Every test also checks that
production traffic never reached the candidate (its copy's request count is exactly the canary's own).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
import tritonclient.http as th
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import ParityConfig
from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.errors import ReleaseError
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.canary.run import run_canary
from pipeline.release.canary.guard import loaded_copies
from pipeline.release.canary.prepare import Candidate
from pipeline.release.promote import SwitchOptions, promote
from pipeline.release.store.canaries import read as read_record
from pipeline.release.store.history import live_stack
from pipeline.release.store.store import ReleaseStore
from pipeline.release.triton_control import TritonReloader
from pipeline.serving.perf_analyzer import locate_perf_analyzer
from pipeline.serving.process import EmbeddedServer
from tests.helpers.release_repo import triton_aborted, xfail_if_triton_aborted, dvc_lock, parity_report, sample_inputs, standin_repository
from tests.helpers.project import RELEASE_CLI, ROOT

pytestmark = pytest.mark.triton
RELEASES = [(1, 8.0), (1, 8.0), (2, 8.0), (1, 40.0)]  # (weights seed, sleep per execute in ms) of releases 1-4
# 4 rounds of about a second: some 40 answers per side each, so a round's p99 is not one stall of a busy machine.
FAST = CanaryConfig(duration_s=4, rounds=4, min_round_requests=20)
KNOBS = ["release.canary.duration_s=4", "release.canary.rounds=4", "release.canary.min_round_requests=20"]


def make_store(tmp: Path) -> ReleaseStore:
    store = ReleaseStore(tmp / "store")
    lock, inputs = dvc_lock(tmp / "dvc.lock"), sample_inputs(tmp / "inputs.json")
    for i, (seed, sleep_ms) in enumerate(RELEASES, 1):
        repo = standin_repository(tmp / f"repo{i}", seed, sleep_ms=sleep_ms, warmup=True)  # as the repository stage ships them
        parity = parity_report(tmp / f"parity{i}.json", onnx=repo / "tiny/1/model.onnx", inputs=inputs)
        build_release(store, BuildInputs(repo, parity, None, lock, git_cwd=tmp), unchecked_evidence=True, tag=False)
    promote(store, "dev", version=1)
    return store


@dataclass
class Load:
    """perf_analyzer standing in for production: unversioned requests to ``tiny`` at a fixed rate.

    perf_analyzer stops within milliseconds of its first failed request, printing ``had error`` on stderr
    (checked with an unload mid-run), so a load still running when the test is done has had none; it is
    stopped then instead of waited for.
    """

    proc: subprocess.Popen[str]
    client: th.InferenceServerClient
    before: int

    def finish(self) -> int:
        """Stop the load; assert it ran throughout and no request failed; return how many it sent (Triton's count)."""
        spanned = self.proc.poll() is None
        self.proc.kill()
        _, err = self.proc.communicate(timeout=60)
        try:
            assert spanned and "had error" not in err, f"perf_analyzer ended early (exit {self.proc.returncode}): {err[-2000:]}"
            return successes(self.client, "tiny") - self.before
        finally:
            self.client.close()  # an open connection makes tritonserver wait 30 s at exit


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ReleaseStore, EmbeddedServer]]:
    store = make_store(tmp_path)
    with EmbeddedServer(store.env_repository("dev"), "tiny", timeout_s=120, log_dir=tmp_path / "logs") as srv:
        yield store, srv


@pytest.fixture
def load(served: tuple[ReleaseStore, EmbeddedServer]) -> Iterator[Callable[..., Load]]:
    _, srv = served
    started: list[subprocess.Popen[str]] = []

    def start(rate: int = 40) -> Load:  # a third of the stand-in's capacity: headroom for a busy neighbour
        pa = locate_perf_analyzer()
        cmd = [str(pa.binary), "-m", "tiny", "-u", srv.http_url, "-i", "http", "--request-rate-range", str(rate), "--request-count", str(rate * 600), "--shape", "x:16"]
        proc = subprocess.Popen(cmd, env=pa.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        # A statistics read answers in milliseconds; a server hung in an abort would hold it for the client's default 60 s.
        client = th.InferenceServerClient(srv.http_url, network_timeout=15)
        try:
            before = successes(client, "tiny")
            deadline = time.monotonic() + 60
            while successes(client, "tiny") < before + 50:  # the load is flowing before the canary starts
                if proc.poll() is not None or time.monotonic() > deadline or triton_aborted(srv):  # an aborted server serves no more
                    proc.kill()  # before reading its output: against a server that hangs it would never exit by itself
                    raise AssertionError(f"the production load never flowed: {proc.communicate()[1][-2000:]}")
                time.sleep(0.05)
        except BaseException:
            client.close()
            raise
        return Load(proc, client, before)

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def successes(client: th.InferenceServerClient, model: str, version: str = "") -> int:
    stats = client.get_inference_statistics(model)["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats if not version or s["version"] == version)


def served_versions(url: str, model: str = "tiny") -> list[int]:
    with contextlib.closing(th.InferenceServerClient(url)) as c:
        index = c.get_model_repository_index()
    return sorted(int(m["version"]) for m in index if m["name"] == model and m.get("state") == "READY")


def copies(url: str) -> list[str]:
    with contextlib.closing(TritonReloader(url, "tiny")) as r:
        return loaded_copies(r, "tiny")


def assert_untouched_by_production(report: dict, url: str) -> None:
    """The copies answered exactly the canary's own requests, and production on ``tiny`` failed none."""
    e = report["errors"]
    assert e["triton"]["candidate"]["success"] == e["requests"] and e["triton"]["live"]["success"] == e["live_requests"], e
    assert e["production"]["failed_during_canary"] == 0 and e["production"]["answered_during_canary"] > 0, e


@pytest.mark.timing  # the verdict judges the p99 ratio of two 8 ms models: a busy neighbour skews one side
def test_identical_weights_pass_and_are_promoted(served: tuple[ReleaseStore, EmbeddedServer], load: Callable[..., Load]) -> None:
    store, srv = served
    production = load(100)
    res = run_canary(store, Candidate("dev", 2), SwitchOptions.of(srv.http_url), FAST, ParityConfig(), metrics=f"127.0.0.1:{srv.metrics_port}")
    sent = production.finish()
    rep = res.report.to_json()  # the record as the store holds it
    assert res.passed, rep["verdict"]
    assert rep["outputs"]["outputs"]["y"]["max_abs"] == 0.0 and rep["outputs"]["distinct"] == 8
    assert rep["latency"]["p99_ratio"]["rounds"] >= 2 and rep["latency"]["p99_ratio"]["value"] <= FAST.max_p99_ratio
    assert rep["errors"]["failed"] == 0 and rep["metrics"]["available"] and rep["metrics"]["candidate"]["success"] > 0
    assert_untouched_by_production(rep, srv.http_url)
    st = store.env_state("dev", "tiny")
    assert st.live == 2 and st.history[-1]["canary"] == rep["id"] and served_versions(srv.http_url) == [2]
    assert copies(srv.http_url) == []
    assert (store.fs.local_path(res.record.rsplit("/", 1)[0]) / f"{rep['id']}.md").is_file()
    listed = CliRunner().invoke(app, ["release", "list", "--store", str(store.url)])
    assert "dev: last canary" in listed.output and "v2 against live v1, PASSED" in listed.output, listed.output
    print(f"\nidentical weights: {rep['checks']}\ntimings: {res.timings}\nproduction requests during the canary: {sent}, failed: 0")


def test_perturbed_weights_fail_on_outputs(served: tuple[ReleaseStore, EmbeddedServer], load: Callable[..., Load], tmp_path: Path, make_params) -> None:  # noqa: ANN001
    store, srv = served
    params = make_params(*KNOBS)
    production = load()
    r = CliRunner().invoke(app, ["release", *canary_args(store, srv, params, 3)])
    production.finish()
    assert r.exit_code == 1, r.output
    assert "| outputs: y | reference |" in r.output and "FAIL |" in r.output and "| production on 'tiny' v1 |" in r.output, r.output
    assert "passes with parity.fp32.per_output.y.atol=" in r.output, r.output
    rep = read_record(store.fs, "dev", "tiny").to_json()
    # Outputs fail; latency is not this test's subject (both sleep 8 ms), so it may go either way on a loaded machine.
    assert rep["status"] == "failed" and "outputs" in [c["name"] for c in rep["checks"] if not c["passed"]], rep["checks"]
    assert_untouched_by_production(rep, srv.http_url)
    assert store.env_state("dev", "tiny").live == 1 and served_versions(srv.http_url) == [1]
    assert 3 not in store.env_state("dev", "tiny").present  # never installed into the environment
    assert copies(srv.http_url) == []
    print(r.output)


@pytest.mark.timing  # judges latency under load, and the share of real traffic by request counts over time
def test_slow_candidate_fails_on_latency_under_a_share_of_real_traffic(served: tuple[ReleaseStore, EmbeddedServer], load: Callable[..., Load]) -> None:
    store, srv = served
    production = load(100)
    cfg = CanaryConfig(traffic=CanaryTraffic.real, duration_s=4, share=0.25, request_rate=40, rounds=4, min_round_requests=10)
    res = run_canary(store, Candidate("dev", 4), SwitchOptions.of(srv.http_url), cfg, ParityConfig(), metrics=f"127.0.0.1:{srv.metrics_port}")
    production.finish()
    rep = res.report.to_json()  # the record as the store holds it
    failed = [c["name"] for c in rep["checks"] if not c["passed"]]
    assert failed == ["latency"] and rep["latency"]["p99_ratio"]["value"] > cfg.max_p99_ratio, rep["checks"]
    lat, prod = rep["latency"], rep["errors"]["production"]["sent_by_canary"]
    assert lat["candidate"]["requests"] == lat["live"]["requests"], lat  # the baseline got as much as the candidate
    share = lat["candidate"]["requests"] / (2 * lat["candidate"]["requests"] + prod)
    assert abs(share - cfg.share) < 0.05, (lat, prod)
    assert_untouched_by_production(rep, srv.http_url)
    assert store.env_state("dev", "tiny").live == 1 and served_versions(srv.http_url) == [1]
    print(f"\nslow candidate: {rep['checks']}")


# ---------------------------------------------------------------- killed, interrupted, aborted
def canary_args(store: ReleaseStore, srv: EmbeddedServer, params: Path, version: int, *extra: str) -> list[str]:
    """``release canary`` of ``version`` in 'dev' on ``srv`` (its metrics port too), judged with ``params``, no git tag."""
    return [
        *("canary", "--env", "dev", "--version", str(version), "--reload", srv.http_url, "--metrics", f"127.0.0.1:{srv.metrics_port}"),
        *("--store", str(store.url), "--params", str(params), "--no-tag", *extra),
    ]


def cli_canary(store: ReleaseStore, srv: EmbeddedServer, params: Path, version: int, *extra: str) -> subprocess.Popen[str]:
    cmd = [*RELEASE_CLI, *canary_args(store, srv, params, version, *extra)]
    return subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no line starting {prefix!r}: {''.join(seen)}{proc.stderr.read() if proc.stderr else ''}")


def settled(url: str, store: ReleaseStore, timeout: float = 60) -> list[int]:
    """Wait until the server serves exactly the pointer's version and no candidate copy; return what it serves."""
    deadline = time.monotonic() + timeout
    while True:
        live = store.env_state("dev", "tiny").live
        if served_versions(url) == [live] and not copies(url):
            return [live]
        assert time.monotonic() < deadline, (served_versions(url), copies(url), live)
        time.sleep(0.2)


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_killed_at_every_phase_the_live_version_serves_and_the_pointer_stays(served: tuple[ReleaseStore, EmbeddedServer], load: Callable[..., Load], make_params) -> None:  # noqa: ANN001, E501
    store, srv = served
    # The switch phase comes only after a passing verdict: a p99 bound a busy neighbour cannot fail (latency is
    # test_identical_weights_pass_and_are_promoted's subject; this one is about kills).
    params = make_params(*KNOBS, "release.canary.max_p99_ratio=5")
    production = load()
    for phase, sig in (("  loading:", signal.SIGKILL), ("  traffic:", signal.SIGKILL), ("  traffic:", signal.SIGINT), ("  switch:", signal.SIGKILL)):
        proc = cli_canary(store, srv, params, 2)
        wait_for_line(proc, phase)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert settled(srv.http_url, store) == [store.env_state("dev", "tiny").live]
        st, rec = store.env_state("dev", "tiny"), read_record(store.fs, "dev", "tiny")
        if phase != "  switch:":
            assert st.live == 1 and 2 not in live_stack(st.history), (phase, st.history)
        else:  # killed while switching: the pointer is wherever the switch got to, and the history agrees with it
            assert live_stack(st.history)[-1] == st.live, (st.live, st.history)
        if sig == signal.SIGINT:
            assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, (proc.returncode, err)
            assert rec.status == "interrupted", rec
        else:
            assert proc.returncode == -signal.SIGKILL and "canary guard:" in err, err
            # After the verdict a kill may land once the record is final ("passed"); before it, the guard marks it.
            assert rec.status in (("killed", "passed") if phase == "  switch:" else ("killed",)), rec
        print(f"\n{phase.strip()} {sig.name}: pointer {st.live}, record {rec.status}, serving {served_versions(srv.http_url)}\n{err.strip()}")
    production.finish()


def test_abort_cleans_up_a_candidate_whose_guard_died_too(served: tuple[ReleaseStore, EmbeddedServer], make_params) -> None:  # noqa: ANN001
    store, srv = served
    params = make_params(*KNOBS[1:], "release.canary.duration_s=60")
    proc = cli_canary(store, srv, params, 3)
    wait_for_line(proc, "  traffic:")
    for pid in children(proc.pid):  # the guard first, so nothing cleans up
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate(timeout=60)
    time.sleep(1)
    left = copies(srv.http_url)
    assert len(left) == 2 and store.env_state("dev", "tiny").live == 1  # the baseline and the candidate
    with pytest.raises(ReleaseError, match="still loaded") as e:  # a new canary refuses before it loads anything
        run_canary(store, Candidate("dev", 2), SwitchOptions.of(srv.http_url), FAST, ParityConfig())
    assert "--abort" in e.value.render()
    r = CliRunner().invoke(app, ["release", "canary", "--env", "dev", "--abort", "--store", str(store.url), "--params", str(params)])
    assert r.exit_code == 0 and f"unloaded the canary's copies {left}" in r.output, r.output
    assert settled(srv.http_url, store) == [1] and read_record(store.fs, "dev", "tiny").status == "aborted"
    print(r.output)


def test_a_server_not_in_explicit_mode_is_refused_before_anything_loads(tmp_path: Path) -> None:
    store = make_store(tmp_path)

    class PollingServer(EmbeddedServer):
        def _command(self, inst):  # noqa: ANN001, ANN202 - the same server, in model-control mode none
            return [c for c in super()._command(inst) if not c.startswith(("--model-control-mode", "--load-model"))] + ["--model-control-mode=none"]

    with PollingServer(store.env_repository("dev"), "tiny", timeout_s=120, log_dir=tmp_path / "logs") as srv:
        with pytest.raises(ReleaseError, match="not in explicit model-control mode") as e:
            run_canary(store, Candidate("dev", 2), SwitchOptions.of(srv.http_url), FAST, ParityConfig())
        assert "polling is enabled" in e.value.render() and "--model-control-mode=explicit" in e.value.render()
        assert served_versions(srv.http_url) == [1] and read_record(store.fs, "dev", "tiny") is None
    assert json.loads(store.fs.read_bytes("history/dev/tiny.json"))[-1]["version"] == 1


@contextlib.contextmanager
def unless_triton_aborts(srv: EmbeddedServer) -> Iterator[None]:
    """Re-raise any failure, except one after the server aborted: that is an xfail that quotes the abort."""
    # An abort already in the log: the server answers nothing from here on, and each request below would wait out its
    # client timeout (up to 240 s) before failing. Say so at once.
    xfail_if_triton_aborted(srv)
    try:
        yield
    except (AssertionError, TimeoutError, OSError, subprocess.TimeoutExpired, ReleaseError):
        xfail_if_triton_aborted(srv)
        raise


T = TypeVar("T")


def _watched(srv: EmbeddedServer, call: Callable[[], T], limit_s: float = 90) -> T:
    """``call()`` from a thread while the server log is watched: a server aborting mid-request never answers, and the
    request would wait out its client timeout before the abort is seen."""
    box: list[T | BaseException] = []

    def run() -> None:
        try:
            box.append(call())
        except Exception as e:  # noqa: BLE001 - re-raised below, in the test's thread
            box.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + limit_s
    while worker.is_alive():
        xfail_if_triton_aborted(srv)
        assert time.monotonic() < deadline, f"no answer after {limit_s:.0f} s"
        worker.join(0.5)
    result = box[0]
    if isinstance(result, BaseException):
        raise result
    return result


def test_unversioned_requests_go_to_the_highest_ready_version(served: tuple[ReleaseStore, EmbeddedServer], load: Callable[..., Load]) -> None:
    """Why the candidate is a model of its own: as a second version of 'tiny' it would take all production traffic.

    Also the negative control of the production load: an unload without a handover fails it.
    """
    store, srv = served
    store.install_version("dev", "tiny", 2, store.manifest("tiny", 2))
    cfg = store.release_config("tiny", 1, None)[0]
    x = th.InferInput("x", [1, 16], "FP32")
    x.set_data_from_numpy(np.zeros((1, 16), np.float32))
    with contextlib.closing(TritonReloader(srv.http_url, "tiny")) as r, contextlib.closing(th.InferenceServerClient(srv.http_url)) as c:
        r.stage(cfg, 1, 2)  # version_policy [1, 2]
        assert c.infer("tiny", [x]).get_response()["model_version"] == "2"

    def retire() -> None:  # its own client: tritonclient's HTTP client (gevent) stays in the thread that made it
        with contextlib.closing(TritonReloader(srv.http_url, "tiny")) as own:
            own.retire(2, 1, cfg)

    with unless_triton_aborts(srv):  # the reload that unloads version 2 is where the server may abort
        _watched(srv, retire)
    with unless_triton_aborts(srv):
        assert _watched(srv, lambda: served_versions(srv.http_url)) == [1]
        production = load()

        # The unload answers once Triton has unloaded the model, after the requests in flight (under full CI passes it
        # went unanswered past 240 s while the load ran); it is also where the server aborts. What this control judges
        # is the load: the unload is sent from a thread, and the load is awaited while the server log is watched.
        def unload() -> None:
            with contextlib.suppress(Exception), contextlib.closing(th.InferenceServerClient(srv.http_url, network_timeout=240)) as c:
                c.unload_model("tiny")

        threading.Thread(target=unload, daemon=True).start()
        deadline = time.monotonic() + 90  # perf_analyzer exits at its first failed request
        while production.proc.poll() is None:
            xfail_if_triton_aborted(srv)
            assert time.monotonic() < deadline, "the production load still runs 90 s after the unload was sent"
            time.sleep(0.5)
        with pytest.raises(AssertionError, match="had error"):
            production.finish()
