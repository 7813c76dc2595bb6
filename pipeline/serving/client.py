"""The one way this project talks to a Triton server: tritonclient (HTTP or gRPC), plus Prometheus /metrics.

Readiness polling, server metadata, model statistics and explicit model control all go through
``tritonclient`` (already a dependency for the release reload), so no module builds REST URLs by
hand and the gRPC protocol comes for free. Triton's ``/metrics`` endpoint is plain Prometheus text on
its own port, outside the inference protocol; :func:`metrics_text` is the only raw HTTP read.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from pipeline.core.errors import ToolError

PROTOCOLS = ("http", "grpc")


class TritonClient:
    """A small facade over ``tritonclient.http`` / ``tritonclient.grpc`` for one server.

    Args:
        url: ``host:port`` of the protocol's endpoint (a leading ``http://`` is ignored).
        protocol: ``http`` or ``grpc``.
        timeout_s: network timeout per call.
    """

    def __init__(self, url: str, protocol: str = "http", timeout_s: float = 10.0) -> None:
        if protocol not in PROTOCOLS:
            raise ToolError(f"unknown Triton protocol {protocol!r}", fix=f"use one of {', '.join(PROTOCOLS)}")
        self.url = url.removeprefix("http://").removeprefix("grpc://").rstrip("/")
        self.protocol = protocol
        self.timeout_s = timeout_s
        self._client: Any = None

    # ------------------------------------------------------------ plumbing
    @property
    def raw(self) -> Any:
        """The underlying tritonclient InferenceServerClient (created on first use)."""
        if self._client is None:
            if self.protocol == "grpc":
                import tritonclient.grpc as grpcclient

                self._client = grpcclient.InferenceServerClient(self.url)
            else:
                import tritonclient.http as httpclient

                self._client = httpclient.InferenceServerClient(
                    self.url, connection_timeout=self.timeout_s, network_timeout=max(self.timeout_s, 300.0)
                )
        return self._client

    def _quiet(self, call: Callable[[], Any], default: Any) -> Any:
        """``call()``, or ``default`` when the server is unreachable or says no (polling must not raise)."""
        from tritonclient.utils import InferenceServerException

        try:
            return call()
        except (InferenceServerException, OSError, ConnectionError, ValueError):
            return default
        except Exception as e:  # noqa: BLE001 - gevent/grpc raise their own types for a refused connection
            if type(e).__module__.split(".")[0] in ("geventhttpclient", "gevent", "grpc", "socket"):
                return default
            raise

    def close(self) -> None:
        if self._client is not None:
            self._quiet(self._client.close, None)
            self._client = None

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ health and metadata
    def live(self) -> bool:
        return bool(self._quiet(lambda: self.raw.is_server_live(), False))

    def ready(self) -> bool:
        return bool(self._quiet(lambda: self.raw.is_server_ready(), False))

    def model_ready(self, name: str, version: str = "") -> bool:
        return bool(self._quiet(lambda: self.raw.is_model_ready(name, version), False))

    def server_version(self) -> str:
        """Triton's version string ("" when unreachable)."""
        meta = self._quiet(lambda: self.raw.get_server_metadata(), None)
        if meta is None:
            return ""
        return str(meta.get("version", "") if isinstance(meta, dict) else getattr(meta, "version", ""))

    def model_statistics(self, name: str) -> dict[str, Any]:
        """Triton's statistics for ``name`` as the REST API's JSON ({} when unreachable)."""
        if self.protocol == "grpc":
            from google.protobuf import json_format

            stats = self._quiet(lambda: self.raw.get_inference_statistics(name), None)
            return json_format.MessageToDict(stats, preserving_proto_field_name=True) if stats is not None else {}
        return dict(self._quiet(lambda: self.raw.get_inference_statistics(name), {}) or {})

    # ------------------------------------------------------------ explicit model control
    def load(self, name: str, config_json: str | None = None) -> None:
        """Load (or reload) ``name``, optionally with a JSON model config override; raise ToolError with Triton's reason."""
        from tritonclient.utils import InferenceServerException

        try:
            self.raw.load_model(name, config=config_json)
        except InferenceServerException as e:
            raise ToolError(
                f"Triton at {self.url} refused to load model '{name}'",
                fix="start tritonserver with --model-control-mode=explicit and the shipped repository, and read its log",
                details={"reason": e.message()},
            ) from None
        except (OSError, ConnectionError) as e:
            raise ToolError(f"cannot reach Triton at {self.url}", fix="check the server address and that it is running", details={"error": e}) from None

    def unload(self, name: str) -> None:
        """Unload ``name``; raise ToolError with Triton's reason."""
        from tritonclient.utils import InferenceServerException

        try:
            self.raw.unload_model(name)
        except InferenceServerException as e:
            raise ToolError(f"Triton at {self.url} refused to unload model '{name}'", details={"reason": e.message()}) from None


def metrics_text(metrics_url: str, timeout_s: float = 10.0) -> str | None:
    """Triton's Prometheus ``/metrics`` text from ``host:port`` (None when unreachable)."""
    if not metrics_url:
        return None
    url = f"http://{metrics_url.removeprefix('http://').rstrip('/')}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - a Triton metrics port we were given
            return r.read().decode()
    except (urllib.error.URLError, OSError):
        return None
