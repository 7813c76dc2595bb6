"""S3 store settings without a server: URL grammar (checked at composition), endpoint choice, messages, the lease.

The S3 behaviour itself is tested against a real S3 API in tests/release/test_release_s3.py.
"""

from __future__ import annotations

import time
import uuid

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from pipeline.core.config import ConfigProblems
from pipeline.core.config.rules import s3_store_parts
from pipeline.core.errors import ConfigError, ReleaseError
from pipeline.params import compose
from pipeline.release.store import s3
from pipeline.release.store.fs import StoreFS
from pipeline.release.store.lock import Busy, Lease, env_lock


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("s3://releases/team/store", (None, "releases", "team/store")),
        ("s3://releases", (None, "releases", "")),
        ("s3://http://127.0.0.1:9000/releases/st/", ("http://127.0.0.1:9000", "releases", "st")),
        ("s3://https://minio.internal:443/rel.v2/a_b/c-d", ("https://minio.internal:443", "rel.v2", "a_b/c-d")),
    ],
)
def test_store_urls_triton_reads(url: str, parts: tuple) -> None:
    assert s3_store_parts(url) == parts


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("s3://http://127.0.0.1/releases/x", "needs the port"),
        ("s3://Releases/x", "bucket 'Releases'"),
        ("s3://ab/x", "bucket 'ab'"),
        ("s3://releases//x", "prefix segments ['']"),
        ("s3://releases/a b/c", "prefix segments ['a b']"),
    ],
)
def test_bad_store_urls_are_refused_at_composition(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        compose([f"release.store={url}"])
    assert isinstance(e.value, ConfigProblems)
    (line,) = [p.line() for p in e.value.problems]
    assert line.startswith("release.store=") and why in line, line


def test_lock_lease_range_is_checked_at_composition() -> None:
    with pytest.raises(ConfigError) as e:
        compose(["release.lock_lease_s=0"])
    assert [p.key for p in e.value.problems] == ["release.lock_lease_s"]  # type: ignore[attr-defined]
    assert "lock_lease_s: 5" in compose(["release.lock_lease_s=5"])


def test_endpoint_comes_from_the_url_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://generic:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:2/")
    assert s3.locate("s3://http://127.0.0.1:9000/rel/p").endpoint == "http://127.0.0.1:9000"
    loc = s3.locate("s3://rel/p")
    assert loc.endpoint == "http://s3-only:2" and loc.triton_url("p/envs/dev") == "s3://http://s3-only:2/rel/p/envs/dev"
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    assert s3.locate("s3://rel/p").endpoint == "http://generic:1"
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    aws = s3.locate("s3://rel/p")
    assert aws.endpoint is None and aws.triton_url("p/envs/dev") == "s3://rel/p/envs/dev"  # Triton's plain AWS form
    with pytest.raises(ReleaseError, match="cannot use release store URL 's3://x/p'"):
        s3.locate("s3://x/p")


def _client_error(code: str, op: str = "ListObjectsV2") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"message for {code}"}}, op)


def test_each_failure_gets_its_own_message_and_never_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sekret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    loc = s3.S3Location("http://127.0.0.1:1", "rel", "p")
    cases = {
        "cannot reach the S3 endpoint http://127.0.0.1:1": EndpointConnectionError(endpoint_url=f"http://127.0.0.1:1/?k={secret}"),
        "the S3 bucket 'rel' does not exist": _client_error("NoSuchBucket"),
        "the S3 server rejected the credentials": _client_error("SignatureDoesNotMatch"),
        "access denied to s3://rel": _client_error("AccessDenied"),
        "an S3 request failed while": OSError(5, f"I/O error {secret}"),
    }
    for what, err in cases.items():
        e = s3.translate(err, loc, "checking the bucket")
        assert e.what.startswith(what) and e.fix and secret not in e.render(), e.render()
    wrapped = FileNotFoundError("The specified bucket does not exist")
    wrapped.__cause__ = _client_error("NoSuchBucket")
    assert "does not exist" in s3.translate(wrapped, loc, "reading").what  # s3fs wraps ClientError in OSError
    assert s3.is_conflict(_client_error("PreconditionFailed", "PutObject")) and not s3.is_conflict(_client_error("NoSuchKey"))


def test_lease_is_exclusive_and_taken_over_only_after_it_expires() -> None:
    """The lease logic on an fsspec memory:// store (S3 makes the same calls atomic; see the stage tests)."""
    fs = StoreFS(f"memory://lease-{uuid.uuid4().hex}")
    first = Lease(fs, "history/dev/tiny.lock", lease_s=60, command="promote tiny v1 to dev")
    first.acquire()
    with pytest.raises(Busy) as b:
        Lease(fs, "history/dev/tiny.lock", lease_s=60, command="other").acquire()
    assert "promote tiny v1 to dev" in b.value.who()
    with pytest.raises(ReleaseError, match="another promote or rollback of 'tiny' in 'dev' is running: promote tiny v1 to dev") as e:
        with env_lock(fs, "dev", "tiny", 60, "promote tiny v2 to dev"):
            pass
    assert "lock expires" in e.value.render() and "release.lock_lease_s=60" in e.value.render()
    first.check()  # renewing keeps it
    first._stop.set()  # the holder "dies": no more heartbeats, nothing deleted
    time.sleep(0.3)
    late = Lease(fs, "history/dev/tiny.lock", lease_s=0.1, command="promote tiny v2 to dev")
    late.acquire()
    assert late.notes and "took over a lock abandoned" in late.notes[0]
    first._stop.clear()
    with pytest.raises(ReleaseError, match="lost the lock before writing"):
        first.check()  # the old holder finds out before it writes anything
    late.release()
    assert not fs.exists("history/dev/tiny.lock")
