"""What is S3-specific in the release store: where the endpoint comes from, one clear error per
failure, and the conditional writes the store's locks and commits are built on.

Endpoint. Taken from the store URL when it is written the way tritonserver takes it
(``s3://http://host:port/bucket/prefix``), else from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``
(the variables every AWS SDK, the aws CLI and DVC read), else AWS itself. Why both: the URL form is
one string that the release commands *and* ``tritonserver --model-repository`` accept, so
``release list`` can print exactly what to serve; the variables are what a CI job already sets for
DVC and boto3. Credentials only ever come from the environment (or the AWS config files), never
from a URL or params.yaml, and no message here prints them (:func:`scrub`).

Conditional writes (RFC 7232 on S3: ``If-None-Match: *`` creates only if the key is absent,
``If-Match: <etag>`` replaces only the version that was read; both answer 412 PreconditionFailed
otherwise). AWS S3 has them since 2024 and moto 5.2 honours them, so two writers can never both
win: :func:`put` raises :class:`Conflict` for the loser.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import os
from dataclasses import dataclass
from typing import Any

from pipeline.core.config.rules import s3_store_parts
from pipeline.core.errors import ReleaseError

_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "InvalidClientTokenId",
    "AuthorizationHeaderMalformed",
    "TokenRefreshRequired",
    "403",
    "Forbidden",
}
_SECRET_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


class Conflict(Exception):
    """A conditional write lost: the object exists (create) or changed since it was read (replace)."""


@dataclass(frozen=True)
class S3Location:
    """Where an S3 store lives."""

    endpoint: str | None  # http(s)://host:port, None = AWS's own
    bucket: str
    prefix: str

    @property
    def root(self) -> str:
        """The store's root as s3fs names it (``bucket/prefix``)."""
        return f"{self.bucket}/{self.prefix}".rstrip("/")

    def url(self, key: str = "") -> str:
        """``s3://bucket/key`` for messages."""
        return f"s3://{self.bucket}/{key}".rstrip("/")

    def triton_url(self, key: str) -> str:
        """The ``--model-repository`` value tritonserver reads ``key`` from (endpoint included when not AWS)."""
        where = f"{self.endpoint}/" if self.endpoint else ""
        return f"s3://{where}{self.bucket}/{key}".rstrip("/")


def locate(url: str) -> S3Location:
    """Parse an ``s3://`` store URL (either form) and settle the endpoint.

    Raises:
        ReleaseError: the URL does not fit S3's and Triton's grammar.
    """
    try:
        endpoint, bucket, prefix = s3_store_parts(url)
    except ValueError as e:
        fix = "pass --store (or set release.store) as s3://bucket/prefix or s3://http://host:port/bucket/prefix"
        raise ReleaseError(f"cannot use release store URL '{url}': {e}", fix=fix) from None
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    return S3Location(endpoint.rstrip("/") if endpoint else None, bucket, prefix)


def open_fs(loc: S3Location) -> Any:
    """An s3fs filesystem for ``loc``: no listing cache (other processes write the store), bounded retries."""
    import s3fs

    fs = s3fs.S3FileSystem(
        endpoint_url=loc.endpoint,
        skip_instance_cache=True,  # a cached instance would keep the credentials and listings of an earlier call
        use_listings_cache=False,  # versions and locks written by other processes must be seen at once
        # Standard retry mode (3 attempts) and a short connect timeout: an unreachable endpoint fails in seconds.
        config_kwargs={"retries": {"max_attempts": 3, "mode": "standard"}, "connect_timeout": 5, "read_timeout": 60},
    )
    fs.retries = 2  # s3fs retries on top of botocore's; its default of 5 multiplies the wait above
    return fs


def scrub(text: str) -> str:
    """``text`` with every secret of the environment replaced by ``***`` (error messages and details)."""
    for var in _SECRET_VARS:
        value = os.environ.get(var)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _client_error(e: BaseException) -> tuple[str, str] | None:
    """(code, message) of the botocore ClientError behind ``e`` (s3fs wraps them in OSError), else None."""
    for err in (e, e.__cause__, e.__context__):
        resp = getattr(err, "response", None)
        if isinstance(resp, dict) and "Error" in resp:
            info = resp["Error"]
            return str(info.get("Code", "")), str(info.get("Message", ""))
    return None


def is_conflict(e: BaseException) -> bool:
    """Whether ``e`` is S3's 412 PreconditionFailed (s3fs turns the If-None-Match one into FileExistsError)."""
    err = _client_error(e)
    return err is not None and err[0] in ("PreconditionFailed", "412")


def translate(e: BaseException, loc: S3Location, action: str) -> ReleaseError:
    """One :class:`ReleaseError` for a failed S3 call: unreachable, no bucket, credentials, permission, other.

    The message names the endpoint and bucket, never a credential (``scrub``).
    """
    from botocore import exceptions as bx

    where: dict[str, object] = {"endpoint": loc.endpoint or "AWS (no AWS_ENDPOINT_URL set)", "bucket": loc.bucket, "while": action}
    env_fix = "set AWS_ENDPOINT_URL (or write the store as s3://http://host:port/bucket/prefix)"
    if isinstance(e, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ConnectionClosedError, bx.ProxyConnectionError, ConnectionError)):
        return ReleaseError(
            f"cannot reach the S3 endpoint {loc.endpoint or '(AWS)'}",
            fix=f"start the S3 server or {env_fix} to one that answers",
            details={**where, "error": scrub(f"{type(e).__name__}: {e}")[:300]},
        )
    if isinstance(e, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return ReleaseError("no S3 credentials found", fix="export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) for the store's account", details=where)
    err = _client_error(e)
    code, message = err if err else ("", str(e))
    if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and action == "checking the bucket"):
        return ReleaseError(
            f"the S3 bucket '{loc.bucket}' does not exist at {loc.endpoint or 'AWS'}",
            fix=f"create it first (e.g. `aws s3 mb s3://{loc.bucket}`), or fix the bucket in --store / release.store",
            details=where,
        )
    if code in _CREDENTIAL_CODES:
        fix = "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) for this endpoint; they are not printed"
        return ReleaseError("the S3 server rejected the credentials", fix=fix, details={**where, "S3 error": code})
    if code == "AccessDenied" or isinstance(e, PermissionError):
        fix = "grant these credentials s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket on the store's prefix"
        return ReleaseError(f"access denied to s3://{loc.bucket}", fix=fix, details={**where, "S3 error": code or "AccessDenied"})
    return ReleaseError(
        f"an S3 request failed while {action}",
        fix="check the S3 server's health and retry; nothing half-written is ever read as a release or a pointer",
        details={**where, "error": scrub(f"{code or type(e).__name__}: {message}")[:400]},
    )


def s3_errors() -> tuple[type[BaseException], ...]:
    """The exception types an S3 call can raise (s3fs's OSErrors, botocore's own)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (OSError, BotoCoreError, ClientError)


def preflight(fs: Any, loc: S3Location) -> None:
    """One cheap request that tells the four setup failures apart before anything is read or written.

    A LIST (not HEAD) because its error body carries the code (NoSuchBucket, InvalidAccessKeyId,
    SignatureDoesNotMatch, AccessDenied) where a HEAD only says 403/404.

    Raises:
        ReleaseError: unreachable endpoint, missing bucket, rejected credentials, no permission.
    """
    try:
        fs.call_s3("list_objects_v2", Bucket=loc.bucket, Prefix=loc.prefix, MaxKeys=1)
    except s3_errors() as e:
        raise translate(e, loc, "checking the bucket") from None


# ---------------------------------------------------------------- conditional object operations
def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


def get(fs: Any, path: str) -> tuple[bytes, str] | None:
    """(bytes, etag) of the object at ``path`` (``bucket/key``) from one GET, None when absent."""
    from fsspec.asyn import sync

    bucket, key = _split(path)

    async def fetch() -> tuple[bytes, str]:
        # The async call: the body must be read on s3fs's loop, from the same response that gave the ETag.
        r = await fs._call_s3("get_object", Bucket=bucket, Key=key)  # noqa: SLF001
        async with r["Body"] as stream:
            return await stream.read(), str(r["ETag"])

    try:
        return sync(fs.loop, fetch)
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Head:
    """An object's ETag and its age by the server's own clock (no client clock skew)."""

    etag: str
    age_s: float


def head(fs: Any, path: str) -> Head | None:
    """ETag and age of ``path``; None when absent."""
    bucket, key = _split(path)
    try:
        r = fs.call_s3("head_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None
    date = r.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    now = email.utils.parsedate_to_datetime(date) if date else _dt.datetime.now(_dt.timezone.utc)
    return Head(r["ETag"], (now - r["LastModified"]).total_seconds())


def put(fs: Any, path: str, data: bytes, match: str | None = None, create: bool = False) -> str:
    """One PUT of ``data``; ``create``: only if absent; ``match``: only if the ETag is still ``match``.

    Returns the new ETag. Raises :class:`Conflict` when the condition does not hold.
    """
    bucket, key = _split(path)
    cond: dict[str, str] = {"IfNoneMatch": "*"} if create else ({"IfMatch": match} if match else {})
    try:
        r = fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **cond)
    except s3_errors() as e:
        if cond and (is_conflict(e) or (match and isinstance(e, FileNotFoundError))):
            raise Conflict(path) from None
        raise
    fs.invalidate_cache(path)
    return str(r["ETag"])


def delete(fs: Any, path: str, match: str | None = None) -> None:
    """Delete ``path``; with ``match`` only if its ETag is still that (a lock we still hold).

    Raises :class:`Conflict` when the object changed; an absent object is not an error.
    """
    bucket, key = _split(path)
    try:
        fs.call_s3("delete_object", Bucket=bucket, Key=key, **({"IfMatch": match} if match else {}))
    except FileNotFoundError:
        return
    except s3_errors() as e:
        if match and is_conflict(e):
            raise Conflict(path) from None
        err = _client_error(e)
        if not (match and err and err[0] in ("NotImplemented", "InvalidArgument", "InvalidRequest", "501")):
            raise
        # AWS has conditional deletes since 2025-09; a server without them gets HEAD, compare, DELETE
        # (a lock is only deleted by its holder, whose lease was just renewed, so the gap is harmless).
        h = head(fs, path)
        if h is not None and h.etag != match:
            raise Conflict(path) from None
        fs.call_s3("delete_object", Bucket=bucket, Key=key)
    fs.invalidate_cache(path)
