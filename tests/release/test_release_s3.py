"""The release store on S3, against a real S3 HTTP API (moto's server mode on a loopback port).

Nothing is patched: s3fs/boto3 in this process, the CLI in subprocesses, all talk HTTP to the server.
Covers the round trip of every release command, the commit protocol (a killed upload is never a
release, a killed promotion's lock expires), and the bad inputs of issue 17: unreachable endpoint,
missing bucket, rejected credentials (never printed), a pointer naming a version that is not in the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.core.errors import ReleaseError
from pipeline.release.store import pointer
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.promote import promote
from pipeline.release.verify import verify_store
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import dvc_lock, parity_report, pointer_reads_while_flipping, tiny_repository
from tests.helpers.markers import starts
from tests.helpers.s3 import CREDENTIALS, S3Server, free_port, s3_server
from tests.helpers.project import RELEASE_CLI, ROOT


@pytest.fixture
def bucket(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the session's server; this process's AWS_* point at it."""
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    return s3.bucket(f"rel-{uuid.uuid4().hex[:12]}")


def cli(cwd: Path, env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``triton-pipeline release ...`` as a user runs it, with exactly ``env`` (plus the basics)."""
    base = {"PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"], "HOME": str(cwd), "COLUMNS": "250"}
    return subprocess.run([*RELEASE_CLI, *args], cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=timeout)


def one_message(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "Traceback" not in out and r.stderr.startswith("ERROR "), out
    assert "fix:" in r.stderr, out
    for n in needles:
        assert n in r.stderr, r.stderr
    return r.stderr


def inputs(tmp: Path, n: int = 2, extra_files: int = 0, size: int = 0) -> list[Path]:
    """``n`` repositories of the tiny model (model.py differs), plus parity.json and dvc.lock in ``tmp``.

    ``extra_files`` files of ``size`` random bytes in each version dir make an upload take a while.
    """
    parity_report(tmp / "parity.json")
    dvc_lock(tmp / "dvc.lock")
    repos = []
    for i in range(1, n + 1):
        repo = tiny_repository(tmp / f"repo{i}", marker=f"v{i}")
        for j in range(extra_files):
            (repo / "tiny/1" / f"blob{j:03d}.bin").write_bytes(os.urandom(size))
        repos.append(repo)
    return repos


def build(store: ReleaseStore, tmp: Path, repo: Path) -> int:
    return build_release(store, BuildInputs(repo, tmp / "parity.json", None, tmp / "dvc.lock", git_cwd=tmp), unchecked_evidence=True, tag=False).version


def build_args(tmp: Path, repo: Path) -> list[str]:
    return [
        "build",
        "--repository",
        str(repo),
        "--parity",
        str(tmp / "parity.json"),
        "--dvc-lock",
        str(tmp / "dvc.lock"),
        "--bench",
        str(tmp / "no-bench.json"),
        "--no-tag",
        "--unchecked-evidence",
    ]


def live_and_history(store: ReleaseStore, env: str = "production") -> tuple[int | None, list[tuple[str, int]]]:
    st = store.env_state(env, "tiny")
    return st.live, [(e["action"], e["version"]) for e in st.history]


# ---------------------------------------------------------------- every command on S3
def test_every_release_command_works_on_s3(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """build, promote, rollback, list, verify, export, import through the CLI on s3://http://host:port/bucket/prefix."""
    repos = inputs(tmp_path)
    # The endpoint is in the URL, as Triton takes it: no AWS_ENDPOINT_URL in the CLI's environment.
    url = f"s3://{s3.endpoint}/{bucket}/team/store"
    env = dict(CREDENTIALS)
    r = cli(tmp_path, env, *build_args(tmp_path, repos[0]), "--store", url)
    assert r.returncode == 0 and f"-> s3://{bucket}/team/store/releases/tiny/1" in r.stdout, r.stdout + r.stderr
    store = ReleaseStore(url)
    assert build(store, tmp_path, repos[1]) == 2 and store.versions("tiny") == [1, 2]
    promote(store, "production", version=1)
    r = cli(tmp_path, env, "promote", "--to", "production", "--version", "2", "--no-tag", "--allow-unchecked-evidence", "--store", url)
    assert r.returncode == 0 and "version 1 -> 2 in 'production' (copied)" in r.stdout, r.stdout + r.stderr
    r = cli(tmp_path, env, "rollback", "--env", "production", "--no-tag", "--store", url)
    assert r.returncode == 0 and "rollback: tiny version 2 -> 1 in 'production' (present)" in r.stdout, r.stdout + r.stderr
    assert live_and_history(store) == (1, [("promote", 1), ("promote", 2), ("rollback", 1)])

    r = cli(tmp_path, env, "list", "--store", url)
    assert r.returncode == 0, r.stderr
    triton_url = f"s3://{s3.endpoint}/{bucket}/team/store/envs/production"
    assert f"--model-repository={triton_url} " in r.stdout, r.stdout
    assert store.env_repository("production") == triton_url
    r = cli(tmp_path, env, "verify", "--store", url)
    assert r.returncode == 0 and "env production: live 1, present [1, 2]" in r.stdout and "all checksums match" in r.stdout, r.stdout + r.stderr

    # export from S3, import into another store on S3 given the plain way (endpoint from the environment).
    archive = tmp_path / "tiny-2.tar.gz"
    assert cli(tmp_path, env, "export", "--version", "2", "--out", str(archive), "--store", url).returncode == 0
    other = s3.bucket(f"air-{uuid.uuid4().hex[:12]}")
    r = cli(tmp_path, s3.env, "import", str(archive), "--store", f"s3://{other}/mirror")
    assert r.returncode == 0 and "imported: tiny version 2" in r.stdout, r.stdout + r.stderr
    mirror = ReleaseStore(f"s3://{other}/mirror")
    assert mirror.versions("tiny") == [2] and mirror.verify_release("tiny", 2).version == 2
    assert not [k for k in s3.keys(other) if k.endswith(".claim") or ".write-probe" in k]  # no marker left behind

    # Tampering is caught on S3 as on disk.
    s3.client().put_object(Bucket=bucket, Key="team/store/releases/tiny/2/files/2/model.py", Body=b"# tampered\n")
    with pytest.raises(ReleaseError, match="changed: 2/model.py"):
        verify_store(store)


def test_pointer_flip_is_one_put_readers_see_old_or_new(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """While promote/rollback flip the pointer, every GET of config.pbtxt parses and names one version."""
    repos = inputs(tmp_path)
    store = ReleaseStore(f"s3://{bucket}/st")
    for repo in repos:
        build(store, tmp_path, repo)
    promote(store, "dev", version=1)
    client = s3.client()

    def read() -> str:
        return client.get_object(Bucket=bucket, Key="st/envs/dev/tiny/config.pbtxt")["Body"].read().decode()

    seen, errors = pointer_reads_while_flipping(store, read, 4, Exception)  # anything a torn or missing object raises
    assert not errors and seen == {(1,), (2,)}, (errors, seen)
    assert len(store.env_state("dev", "tiny").history) == 9


# ---------------------------------------------------------------- killed mid-way
def _kill_when(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"finished before it could be killed: {proc.communicate()}"
        assert time.monotonic() < deadline, "never reached the point to kill at"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


N_BLOBS = 150  # enough that the upload is still running when a poll of the bucket has seen its first files


def test_upload_killed_halfway_is_never_a_release(tmp_path: Path, s3: S3Server, bucket: str, make_params: Callable[..., Path]) -> None:
    """SIGKILL `release build` mid-upload: files and a claim remain, but no manifest, so no release; the next build cleans up."""
    (repo,) = inputs(tmp_path, n=1, extra_files=N_BLOBS, size=64 * 1024)
    url = f"s3://{bucket}/st"
    params = make_params("release.lock_lease_s=1", name="fast-lease.yaml")
    proc = subprocess.Popen(
        [*RELEASE_CLI, *build_args(tmp_path, repo), "--store", url, "--params", str(params)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _kill_when(proc, lambda: len([k for k in s3.keys(bucket, "st/releases/tiny/1/files/") if "blob" in k]) >= 3)

    keys = s3.keys(bucket, "st/releases/")
    assert "st/releases/tiny/1/.claim" in keys and not any(k.endswith("manifest.json") for k in keys)
    assert 3 <= len([k for k in keys if "blob" in k]) < N_BLOBS  # really halfway
    store = ReleaseStore(url, lock_lease_s=1)
    assert store.versions("tiny") == []
    r = cli(tmp_path, s3.env, "list", "--store", url, "--params", str(params))
    assert r.returncode == 0 and ("tiny 1: upload in progress" in r.stdout or "tiny 1: unfinished upload" in r.stdout), r.stdout
    with pytest.raises(ReleaseError, match="there are no releases of 'tiny'"):
        promote(store, "dev")
    time.sleep(2.5)  # past the 1 s lease on S3's one-second clock (LastModified and Date): the claim's holder is dead
    assert "release tiny 1: unfinished upload (" in "\n".join(verify_store(store))

    # The next build takes over the dead claim (older than the lease), removes the leftovers and reuses the number.
    assert build(store, tmp_path, repo) == 1
    assert store.verify_release("tiny", 1) and not [k for k in s3.keys(bucket) if k.endswith(".claim")]


def test_promotion_killed_mid_copy_leaves_the_pointer_and_a_lock_that_expires(tmp_path: Path, s3: S3Server, bucket: str, make_params: Callable[..., Path]) -> None:
    repos = inputs(tmp_path, extra_files=30, size=128 * 1024)
    url = f"s3://{bucket}/st"
    store = ReleaseStore(url, lock_lease_s=3)
    for repo in repos:
        build(store, tmp_path, repo)
    promote(store, "production", version=1)
    params = make_params("release.lock_lease_s=3", name="lease.yaml")
    proc = subprocess.Popen(
        [
            *RELEASE_CLI,
            "promote",
            "--to",
            "production",
            "--version",
            "2",
            "--no-tag",
            "--allow-unchecked-evidence",
            "--store",
            url,
            "--params",
            str(params),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _kill_when(proc, lambda: len(s3.keys(bucket, "st/envs/production/tiny/2/")) >= 5)
    # s3fs uploads concurrently, so the kill can land after the last file arrived; a copy killed one file earlier
    # is what is judged below, whichever way the race went.
    copied = s3.keys(bucket, "st/envs/production/tiny/2/")
    s3.client().delete_object(Bucket=bucket, Key=copied[-1])

    assert live_and_history(store) == (1, [("promote", 1)])  # nothing switched
    holder = json.loads(s3.client().get_object(Bucket=bucket, Key="st/history/production/tiny.lock")["Body"].read())
    assert holder["pid"] == proc.pid and holder["command"] == "promote tiny v2 to production"
    # Within the lease: refused, naming the holder and when its lock expires.
    with pytest.raises(ReleaseError, match="another promote or rollback of 'tiny' in 'production' is running: promote tiny v2 to production") as e:
        promote(store, "production", version=2)
    assert f"pid {proc.pid}" in e.value.render() and "lock expires" in e.value.render()
    # After it: taken over; the half-copied version dir is rewritten from the verified release.
    time.sleep(4.5)  # past the 3 s lease on S3's one-second clock (LastModified and Date)
    res = promote(store, "production", version=2)
    assert res.copy == "replaced" and any("took over a lock abandoned" in n for n in res.notes), res
    assert live_and_history(store) == (2, [("promote", 1), ("promote", 2)])
    assert "st/history/production/tiny.lock" not in s3.keys(bucket)
    assert verify_store(store)


# ---------------------------------------------------------------- bad input
@pytest.mark.slow  # the client retries a closed port for seconds
def test_unreachable_endpoint(tmp_path: Path) -> None:
    port = free_port()
    r = cli(tmp_path, {**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}, "list", "--store", "s3://releases/st", timeout=60)
    one_message(r, f"cannot reach the S3 endpoint http://127.0.0.1:{port}", "AWS_ENDPOINT_URL")


def test_missing_bucket_is_named_and_never_created(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    (repo,) = inputs(tmp_path, n=1)
    r = cli(tmp_path, s3.env, *build_args(tmp_path, repo), "--store", "s3://no-such-bucket-here/st")
    one_message(r, "the S3 bucket 'no-such-bucket-here' does not exist", "aws s3 mb s3://no-such-bucket-here")
    names = [b["Name"] for b in s3.client().list_buckets()["Buckets"]]
    assert "no-such-bucket-here" not in names  # s3fs would have created it


def test_malformed_store_url(tmp_path: Path) -> None:
    r = cli(tmp_path, dict(CREDENTIALS), "list", "--store", "s3://http://127.0.0.1/Bucket/x")
    one_message(r, "must be http(s)://host:port")


@pytest.fixture(scope="module")
@starts("s3")
def auth_s3() -> Iterator[tuple[S3Server, dict[str, str]]]:
    """A second moto server that checks signatures (moto's IAM mode after 4 unauthenticated calls); yields it and good credentials."""
    import boto3

    old = os.environ.get("INITIAL_NO_AUTH_ACTION_COUNT")
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"  # read by moto at import: create user, key, policy, bucket
    try:
        with s3_server() as srv:
            iam = boto3.client("iam", endpoint_url=srv.endpoint, region_name="us-east-1", **{k.lower(): v for k, v in CREDENTIALS.items() if k != "AWS_DEFAULT_REGION"})
            iam.create_user(UserName="ci")
            key = iam.create_access_key(UserName="ci")["AccessKey"]
            iam.put_user_policy(
                UserName="ci", PolicyName="all", PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
            )
            good = {**srv.env, "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
            boto3.client(
                "s3", endpoint_url=srv.endpoint, region_name="us-east-1", aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"]
            ).create_bucket(Bucket="guarded")
            yield srv, good
    finally:
        if old is None:
            os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
        else:
            os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = old


def test_wrong_credentials_are_refused_and_never_printed(tmp_path: Path, auth_s3: tuple[S3Server, dict[str, str]]) -> None:
    srv, good = auth_s3
    (repo,) = inputs(tmp_path, n=1)
    assert cli(tmp_path, good, *build_args(tmp_path, repo), "--store", "s3://guarded/st").returncode == 0
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    # A wrong secret for a real key (every command), and an unknown key.
    for args in (["list"], ["promote", "--to", "dev", "--no-tag"], build_args(tmp_path, repo)):
        for kid in (good["AWS_ACCESS_KEY_ID"], "AKIAWRONGWRONGWRONG1")[: 2 if args == ["list"] else 1]:
            r = cli(tmp_path, {**good, "AWS_ACCESS_KEY_ID": kid, "AWS_SECRET_ACCESS_KEY": secret}, *args, "--store", "s3://guarded/st")
            one_message(r, "the S3 server rejected the credentials", "AWS_SECRET_ACCESS_KEY")
            assert secret not in r.stdout + r.stderr and good["AWS_SECRET_ACCESS_KEY"] not in r.stdout + r.stderr
    import boto3  # the server's own view, with good credentials

    c = boto3.client("s3", endpoint_url=srv.endpoint, region_name="us-east-1", aws_access_key_id=good["AWS_ACCESS_KEY_ID"], aws_secret_access_key=good["AWS_SECRET_ACCESS_KEY"])
    keys = [o["Key"] for o in c.list_objects_v2(Bucket="guarded").get("Contents", [])]
    assert [k for k in keys if k.endswith("manifest.json")] == ["st/releases/tiny/1/manifest.json"]  # nothing half-written
    assert not [k for k in keys if k.startswith("st/envs/") or k.endswith(".claim")]


def test_pointer_naming_a_version_not_in_the_store(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    repos = inputs(tmp_path)
    url = f"s3://{bucket}/st"
    store = ReleaseStore(url)
    for repo in repos:
        build(store, tmp_path, repo)
    promote(store, "production", version=1)
    promote(store, "production", version=2)
    # Someone points production at a version that was never released here (a hand edit, a copy from another store).
    cfg = pointer.parse_config(store.fs.read_text("envs/production/tiny/config.pbtxt"), "x")
    s3.client().put_object(Bucket=bucket, Key="st/envs/production/tiny/config.pbtxt", Body=pointer.render(cfg, "production", "tiny", 7, "default"))
    one_message(
        cli(tmp_path, s3.env, "rollback", "--env", "production", "--no-tag", "--store", url),
        "the pointer of 'production' names version 7 of 'tiny', which is not a release",
        "release promote --to production --version <N>",
    )
    one_message(cli(tmp_path, s3.env, "verify", "--store", url), "pointer names version 7, which is not a release in the store")
    r = cli(tmp_path, s3.env, "list", "--store", url)
    assert r.returncode == 0 and "WARNING production: its pointer names version 7" in r.stdout, r.stdout
    assert live_and_history(store) == (7, [("promote", 1), ("promote", 2)])  # the refusals changed nothing
    # The fix the message gives works.
    r = cli(tmp_path, s3.env, "promote", "--to", "production", "--version", "2", "--no-tag", "--allow-unchecked-evidence", "--store", url)
    assert r.returncode == 0 and "the pointer named version 7, which is not a release" in r.stdout, r.stdout + r.stderr
    assert live_and_history(store)[0] == 2 and verify_store(store)


def test_signed_release_on_s3(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """Signed before upload (from a local copy), verified from S3; a claim left by a process killed right after its commit is no content."""
    pytest.importorskip("model_signing", reason="model-signing is optional")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    priv, pub = tmp_path / "k.pem", tmp_path / "k.pub.pem"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (repo,) = inputs(tmp_path, n=1)
    store = ReleaseStore(f"s3://{bucket}/signed")
    build_release(store, BuildInputs(repo, tmp_path / "parity.json", None, tmp_path / "dvc.lock", git_cwd=tmp_path), unchecked_evidence=True, sign_key=priv, tag=False)
    assert "signed/releases/tiny/1/release.sig" in s3.keys(bucket)
    s3.client().put_object(Bucket=bucket, Key="signed/releases/tiny/1/.claim", Body=b"{}")
    assert verify_store(store, public_key=str(pub))
    assert promote(store, "production", version=1, public_key=str(pub)).version == 1
    s3.client().put_object(Bucket=bucket, Key="signed/releases/tiny/1/manifest.json", Body=store.fs.read_bytes("releases/tiny/1/manifest.json").replace(b'"tiny"', b'"tiny" '))
    with pytest.raises(ReleaseError, match="signature verification failed"):
        verify_store(store, public_key=str(pub))
