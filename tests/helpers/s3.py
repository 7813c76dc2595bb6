"""A real S3 HTTP API for the tests: moto's server mode on a free loopback port (as DVC's own tests use).

Nothing is patched in-process: DVC, s3fs, boto3 and tritonserver all talk HTTP to the server. The
credentials are dummies; moto accepts any.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """A running moto server: its endpoint and the environment a client needs to reach it."""

    port: int
    proc: subprocess.Popen[bytes]
    buckets: list[str] = field(default_factory=list)
    _client: Any = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Credentials and endpoint for any AWS SDK client (boto3, s3fs, DVC, tritonserver)."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def client(self) -> Any:
        """One boto3 client per server, made on first use: the tests poll the bucket in loops (about 20 ms of CPU
        to make a client, more than the request)."""
        if self._client is None:
            import boto3

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                region_name="us-east-1",
            )
        return self._client

    def bucket(self, name: str) -> str:
        """Create bucket ``name`` (>= 3 characters) and return it."""
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@contextmanager
def s3_server(timeout_s: float = 60.0) -> Iterator[S3Server]:
    """Start ``python -m moto.server`` on a free loopback port; stop it (and nothing else) on exit."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **CREDENTIALS}
    )
    server = S3Server(port, proc)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto.server exited with {proc.returncode} before it answered on port {port}")
            try:
                with urllib.request.urlopen(f"{server.endpoint}/moto-api/", timeout=2):  # noqa: S310 - loopback test server
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto.server did not answer on port {port} within {timeout_s} s") from None
                time.sleep(0.2)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def s3_triton_server(repository_url: str, model: str, **kwargs: Any) -> Any:
    """The embedded tritonserver (pipeline.serving.process.EmbeddedServer) reading ``s3://http://host:port/bucket/prefix``.

    tritonserver resolves the S3 URL itself, with AWS_* from this process's environment. It copies each model it loads
    into a ``folderXXXXXX`` directory and removes it only on a clean unload, never when stopped as the tests stop it:
    TRITON_AWS_MOUNT_DIRECTORY puts those copies in a directory of this server's, removed when it stops.
    """
    from pipeline.serving.install import TritonInstall
    from pipeline.serving.process import EmbeddedServer

    class S3TritonServer(EmbeddedServer):
        def __init__(self) -> None:
            super().__init__(".", model, **kwargs)
            self.repo_dir = repository_url  # type: ignore[assignment] - not a local path
            self.mount = tempfile.TemporaryDirectory(prefix="tritonserver-s3-")

        def _env(self, inst: TritonInstall) -> dict[str, str]:
            return {**super()._env(inst), "TRITON_AWS_MOUNT_DIRECTORY": self.mount.name}

        def stop(self) -> None:
            super().stop()
            self.mount.cleanup()

    return S3TritonServer()
