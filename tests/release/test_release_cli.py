"""The `triton-pipeline release ...` commands as a user runs them: exit codes and one-message errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.release_repo import dvc_lock, parity_report, tiny_repository
from tests.helpers.project import ROOT


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "release", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd), "COLUMNS": "200"},
    )


def assert_one_message(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr and r.stderr.startswith("ERROR "), r.stderr
    assert "fix:" in r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def project(tmp_path: Path, *models: str) -> list[str]:
    """A project dir with a passing parity report and dvc.lock; returns the --store arguments."""
    for name in models:
        tiny_repository(tmp_path / "artifacts/model_repository", name=name)
    parity_report(tmp_path / "artifacts/reports/parity.json")
    dvc_lock(tmp_path / "dvc.lock")
    return ["--store", str(tmp_path / "store")]


def test_build_promote_rollback_list_verify(tmp_path: Path) -> None:
    store = project(tmp_path, "tiny")
    # Defaults: artifacts/model_repository, artifacts/reports/parity.json, dvc.lock, no params.yaml.
    r = cli(tmp_path, "build", "--unchecked-evidence", *store)
    assert r.returncode == 0, r.stderr
    assert "built release tiny version 1" in r.stdout and "git tag: not tagged (no git repository)" in r.stdout
    (tmp_path / "artifacts/model_repository/tiny/1/model.py").write_text("# changed model\n")
    assert cli(tmp_path, "build", "--unchecked-evidence", *store).returncode == 0

    r = cli(tmp_path, "promote", "--to", "dev", "--version", "1", *store)
    assert r.returncode == 0 and "promote: tiny version (none) -> 1 in 'dev' (copied)" in r.stdout, r.stdout + r.stderr
    r = cli(tmp_path, "promote", "--to", "dev", *store)
    assert r.returncode == 0 and "version 1 -> 2" in r.stdout
    r = cli(tmp_path, "list", *store)
    assert r.returncode == 0 and "dev" in r.stdout
    r = cli(tmp_path, "rollback", "--env", "dev", *store)
    assert r.returncode == 0 and "rollback: tiny version 2 -> 1 in 'dev'" in r.stdout
    assert_one_message(cli(tmp_path, "rollback", "--env", "dev", *store), "no earlier release to roll back to in 'dev'")
    r = cli(tmp_path, "verify", *store)
    assert r.returncode == 0 and "all checksums match" in r.stdout

    assert_one_message(cli(tmp_path, "promote", "--to", "dev", "--version", "9", *store), "release version 9 of 'tiny' does not exist", "[1, 2]")
    (tmp_path / "store/releases/tiny/2/files/2/model.py").write_text("# tampered\n")
    assert_one_message(cli(tmp_path, "verify", *store), "changed: 2/model.py")


def test_build_refusals(tmp_path: Path) -> None:
    tiny_repository(tmp_path / "artifacts/model_repository")
    dvc_lock(tmp_path / "dvc.lock")
    assert_one_message(cli(tmp_path, "build", "--unchecked-evidence", "--store", str(tmp_path / "s")), "parity report not found")
    parity_report(tmp_path / "artifacts/reports/parity.json", failed=("fp32",))
    assert_one_message(cli(tmp_path, "build", "--unchecked-evidence", "--store", str(tmp_path / "s")), "parity failed", "fp32")
    parity_report(tmp_path / "artifacts/reports/parity.json")
    (tmp_path / "file").write_text("x")
    assert_one_message(cli(tmp_path, "build", "--unchecked-evidence", "--store", str(tmp_path / "file/store")), "the release store is not writable", "NotADirectoryError")
    assert_one_message(cli(tmp_path, "rollback", "--env", "dev", "--store", str(tmp_path / "s")), "no releases")


def test_repository_with_two_models_gets_one_release_each(tmp_path: Path) -> None:
    store = project(tmp_path, "tiny", "tiny_trt")
    r = cli(tmp_path, "build", "--unchecked-evidence", *store)
    assert r.returncode == 0, r.stderr
    assert "built release tiny version 1" in r.stdout and "built release tiny_trt version 1" in r.stdout
    # Without --model, tiny and tiny_trt switch as one set; built outside git, nothing says they belong together: refused.
    assert_one_message(cli(tmp_path, "promote", "--to", "dev", *store), "no release of 'tiny_trt' was built with release 1 of 'tiny'", "--model")
    assert cli(tmp_path, "promote", "--to", "dev", "--model", "tiny_trt", *store).returncode == 0


def test_list_is_readable_in_a_pipe(tmp_path: Path) -> None:
    """Finding 11: off a terminal rich cut the table at 80 columns, so CI logs read "…"."""
    store = ["--store", str(tmp_path / ("a-store-with-a-long-path-" + "x" * 40))]
    project(tmp_path, "tiny")
    assert cli(tmp_path, "build", "--unchecked-evidence", *store).returncode == 0
    assert_one_message(cli(tmp_path, "promote", "--to", "production", *store), "does not vouch for, and 'production' requires it", "--allow-unchecked-evidence")
    for env in ("dev", "staging", "production"):
        assert cli(tmp_path, "promote", "--to", env, "--allow-unchecked-evidence", *store).returncode == 0
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no COLUMNS: what a CI job has
    r = subprocess.run([sys.executable, "-m", "pipeline.cli", "release", "list", *store], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout, r.stdout
    assert "dev, staging, production" in r.stdout and "created UTC" in r.stdout and "installed in" in r.stdout


# Deliver a real SIGINT at a chosen point of `release build` (deterministic, unlike a timed kill).
INTERRUPT_AT = """\
import os, signal, sys, time

def interrupt(*_a, **_k):
    os.kill(os.getpid(), signal.SIGINT)  # Python raises KeyboardInterrupt right here
    time.sleep(5)

where = sys.argv.pop(1)
import pipeline  # noqa: F401 - the package is always imported first
if where == "import":
    import builtins
    real_import = builtins.__import__
    builtins.__import__ = lambda name, *a, **k: interrupt() if name == "rich.table" else real_import(name, *a, **k)
elif where == "parse":
    import typer._click.core as click_core
    click_core.Parameter.handle_parse_result = interrupt
elif where == "check":
    import pipeline.release.evidence.provenance as provenance
    provenance.git_info = interrupt
elif where == "upload":
    import pipeline.release.store.fs as fs
    real_put, calls = fs.StoreFS.put_file, []
    def put(self, *a):
        calls.append(a)
        return interrupt() if len(calls) == 3 else real_put(self, *a)
    fs.StoreFS.put_file = put
from pipeline.cli import app
sys.argv[0] = "triton-pipeline"
app()
"""


def test_ctrl_c_anywhere_prints_one_line(tmp_path: Path) -> None:
    """Ctrl-C while importing, parsing options, checking or uploading: one line, no traceback, no partial release.

    (Parsing used to exit 130 silently: typer swallows the interrupt outside a command's body.)
    """
    bad = {}
    for where in ("import", "parse", "check", "upload"):
        cwd = tmp_path / where
        store = project(cwd, "tiny")
        r = subprocess.run(
            [sys.executable, "-c", INTERRUPT_AT, where, "release", "build", "--unchecked-evidence", *store],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
        )
        releases = cwd / "store/releases/tiny"
        if (
            r.returncode not in (130, -2)  # -2: the interpreter re-raised SIGINT after the hook printed
            or [ln for ln in r.stderr.splitlines() if ln.strip()] != ["interrupted"]
            or (releases.exists() and list(releases.iterdir()))
        ):  # a staged upload must be removed
            bad[where] = (r.returncode, r.stderr[-800:], r.stdout[-300:])
    assert not bad, bad


def test_promote_and_rollback_switch_a_model_and_its_text_endpoint_as_one_set(tmp_path: Path) -> None:
    """`<name>_text` (and `<name>_trt`) ship beside `<name>`: without --model, promote and rollback switch them together,
    each companion at the release built from the same commit; a store of unrelated models still asks which one."""
    store = project(tmp_path, "tiny", "tiny_text")
    cache = tmp_path / "artifacts/model_repository/tiny_text/1/__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"bytecode a served python model left")  # never shipped
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=tmp_path, check=True)
    assert cli(tmp_path, "build", "--unchecked-evidence", "--no-tag", *store).returncode == 0
    subprocess.run([*git, "commit", "-qm", "two", "--allow-empty"], cwd=tmp_path, check=True)
    r = cli(tmp_path, "build", "--unchecked-evidence", "--no-tag", "--model", "tiny", *store)  # tiny 2 alone: no tiny_text from that commit
    assert r.returncode == 0, r.stderr

    r = cli(tmp_path, "promote", "--to", "dev", "--version", "1", "--no-tag", *store)
    assert r.returncode == 0, r.stderr
    assert "promote: tiny version (none) -> 1 in 'dev'" in r.stdout and "promote: tiny_text version (none) -> 1 in 'dev'" in r.stdout
    assert_one_message(cli(tmp_path, "promote", "--to", "dev", "--version", "2", "--no-tag", *store), "no release of 'tiny_text' was built with release 2 of 'tiny'")
    assert cli(tmp_path, "promote", "--to", "dev", "--version", "2", "--model", "tiny", "--no-tag", *store).returncode == 0  # one model, when named
    r = cli(tmp_path, "rollback", "--env", "dev", "--no-tag", *store)
    assert "rollback: tiny version 2 -> 1 in 'dev'" in r.stdout, r.stdout + r.stderr
    releases = tmp_path / "store/releases/tiny_text"
    assert not list(releases.rglob("__pycache__"))
    served = tmp_path / "store/envs/dev/tiny_text/1/__pycache__"  # what a fleet server's python stub writes
    served.mkdir()
    (served / "model.cpython-311.pyc").write_bytes(b"x")
    r = cli(tmp_path, "verify", *store)
    assert r.returncode == 0 and "all checksums match" in r.stdout, r.stdout + r.stderr

    other = project(tmp_path / "b", "tiny", "other")
    assert cli(tmp_path / "b", "build", "--unchecked-evidence", "--no-tag", *other).returncode == 0
    assert_one_message(cli(tmp_path / "b", "promote", "--to", "dev", "--no-tag", *other), "holds 2 models; say which one")


def test_list_tells_to_start_the_cache_an_environment_s_config_turns_on(tmp_path: Path) -> None:
    """A config with response_cache on caches nothing on a server started without --cache-config: the serve line says
    so for the environment that serves it, and only there."""
    from pipeline.release.build import BuildInputs, build_release
    from pipeline.release.listing import describe
    from pipeline.release.promote import promote
    from pipeline.release.store.store import ReleaseStore
    from tests.helpers.release_repo import dvc_lock, parity_report, tiny_repository

    repo = tiny_repository(tmp_path / "repo")
    thr = repo / "tiny" / "configs" / "throughput.pbtxt"
    thr.write_text(thr.read_text() + "response_cache {\n  enable: true\n}\n")
    store = ReleaseStore(tmp_path / "store")
    build_release(store, BuildInputs(repo, parity_report(tmp_path / "parity.json"), None, dvc_lock(tmp_path / "dvc.lock"), git_cwd=tmp_path), unchecked_evidence=True, tag=False)
    promote(store, "dev", version=1, variant="throughput")
    promote(store, "staging", version=1, variant="latency")
    _, lines = describe(store, "tiny")
    serve = {line.split(":", 1)[0].strip(): line for line in lines if "serve with tritonserver" in line}
    assert "--cache-config=local,size=" in serve["dev"], serve
    assert "--cache-config" not in serve["staging"] and "--cache-config" not in serve["production"], serve
