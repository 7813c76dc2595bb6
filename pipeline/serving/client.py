"""The one way this project talks to a Triton server: tritonclient (HTTP or gRPC), plus Prometheus /metrics.

Readiness polling, server metadata, model statistics and explicit model control all go through
``tritonclient`` (already a dependency for the release reload), so no module builds REST URLs by
hand and the gRPC protocol comes for free. Triton's ``/metrics`` endpoint is plain Prometheus text on
its own port, outside the inference protocol; :func:`metrics_text` is the only raw HTTP read.

Imports nothing from the other serving modules, so every one of them may use it.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import ToolError
from pipeline.core.samples import contiguous

PROTOCOLS = ("http", "grpc")
# Loading a model (ORT session, python stub start) can take minutes; a health call should not.
LOAD_TIMEOUT_S = 300.0


def infer_inputs(row: dict[str, Any], protocol: str = "http") -> list[Any]:
    """A request row (name -> numpy array) as tritonclient inputs of ``protocol`` (binary tensors)."""
    from tritonclient.utils import np_to_triton_dtype

    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    out = []
    for name, arr in row.items():
        x = module.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        x.set_data_from_numpy(contiguous(arr))
        out.append(x)
    return out


class TritonClient:
    """A small facade over ``tritonclient.http`` / ``tritonclient.grpc`` for one server.

    Health and metadata calls are quiet: an unreachable server or a "no" gives ``False``/``""``/``{}``
    (polling must not raise) and :attr:`last_error` says why. Model control raises :class:`ToolError`.

    Args:
        url: ``host:port`` of the protocol's endpoint (a leading ``http://`` or ``grpc://`` is ignored).
        protocol: ``http`` or ``grpc``.
        timeout_s: network timeout of a health or metadata call.
        load_timeout_s: network timeout of a load or unload.

    Raises:
        ToolError: an unknown ``protocol``.
    """

    def __init__(self, url: str, protocol: str = "http", timeout_s: float = 10.0, load_timeout_s: float = LOAD_TIMEOUT_S) -> None:
        if protocol not in PROTOCOLS:
            raise ToolError(f"unknown Triton protocol {protocol!r}", fix=f"use one of {', '.join(PROTOCOLS)}")
        self.url = url.removeprefix("http://").removeprefix("grpc://").rstrip("/")
        self.protocol = str(protocol)
        self.timeout_s = timeout_s
        self.load_timeout_s = load_timeout_s
        self.last_error = ""  # why the last quiet call gave its default
        self._clients: dict[bool, Any] = {}

    # ------------------------------------------------------------ plumbing
    def _client(self, long: bool = False) -> Any:
        """The tritonclient InferenceServerClient; HTTP keeps a second one for loads (its timeout is per client)."""
        key = long and self.protocol == "http"
        if key not in self._clients:
            if self.protocol == "grpc":
                import tritonclient.grpc as grpcclient

                self._clients[key] = grpcclient.InferenceServerClient(self.url)
            else:
                import tritonclient.http as httpclient

                _quiet_gevent_interrupts()
                timeout = self.load_timeout_s if long else self.timeout_s
                self._clients[key] = httpclient.InferenceServerClient(self.url, connection_timeout=self.timeout_s, network_timeout=timeout)
        return self._clients[key]

    @property
    def raw(self) -> Any:
        """The underlying tritonclient InferenceServerClient (e.g. for ``infer``), created on first use."""
        return self._client()

    def _call(self, method: str, *args: Any, long: bool = False, **kwargs: Any) -> Any:
        """``raw.<method>(*args)`` with this client's timeout (gRPC takes it per call)."""
        if self.protocol == "grpc":
            kwargs["client_timeout"] = self.load_timeout_s if long else self.timeout_s
        return getattr(self._client(long), method)(*args, **kwargs)

    def _quiet(self, call: Callable[[], Any], default: Any) -> Any:
        """``call()``, or ``default`` when the server is unreachable or says no (polling must not raise)."""
        from tritonclient.utils import InferenceServerException

        self.last_error = ""
        try:
            return call()
        except (InferenceServerException, OSError, ValueError) as e:
            self.last_error = str(e).strip() or type(e).__name__
            return default
        except Exception as e:  # noqa: BLE001 - gevent/grpc raise their own types for a refused connection
            if type(e).__module__.split(".")[0] in ("geventhttpclient", "gevent", "grpc", "socket"):
                self.last_error = str(e).strip() or type(e).__name__
                return default
            raise

    def close(self) -> None:
        """Close the connections (safe to call twice)."""
        for client in self._clients.values():
            self._quiet(client.close, None)
        self._clients.clear()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ health and metadata
    def live(self) -> bool:
        """Whether the server answers and says it is live."""
        return bool(self._quiet(lambda: self._call("is_server_live"), False))

    def ready(self) -> bool:
        """Whether the server answers and says it is ready."""
        return bool(self._quiet(lambda: self._call("is_server_ready"), False))

    def model_ready(self, name: str, version: str = "") -> bool:
        """Whether ``name`` (a given ``version``, or any) is ready to serve."""
        return bool(self._quiet(lambda: self._call("is_model_ready", name, version), False))

    def wait_ready(self, models: Iterable[str], timeout_s: float, is_alive: Callable[[], bool] | None = None, poll_s: float = 0.25) -> bool:
        """Poll until the server and every model in ``models`` are ready.

        Returns False when ``timeout_s`` runs out or ``is_alive()`` (e.g. "the server process has not
        exited") turns False first, so a server that died is not waited for.
        """
        names = list(models)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if is_alive is not None and not is_alive():
                return False
            if self.ready() and all(self.model_ready(m) for m in names):
                return True
            time.sleep(poll_s)
        return False

    def server_version(self) -> str:
        """Triton's version string ("" when unreachable)."""
        meta = self._quiet(lambda: self._call("get_server_metadata"), None)
        if meta is None:
            return ""
        return str(meta.get("version", "") if isinstance(meta, dict) else getattr(meta, "version", ""))

    def model_statistics(self, name: str) -> dict[str, Any]:
        """Triton's statistics for ``name`` in the REST API's JSON shape, for either protocol ({} when unreachable)."""
        stats = self._quiet(lambda: self._call("get_inference_statistics", name), None)
        if stats is None:
            return {}
        return dict(stats) if self.protocol == "http" else _rest_json(stats)

    def inference_stats(self, name: str) -> dict[str, Any]:
        """The ``inference_stats`` of ``name``'s first version in :meth:`model_statistics` ({} when it has none)."""
        stats = self.model_statistics(name).get("model_stats") or [{}]
        return dict(stats[0].get("inference_stats", {}))

    def model_config(self, name: str) -> mc.ModelConfig | None:
        """The config ``name`` is served with, as Triton's schema (None when unreachable or not loaded)."""
        got = self._quiet(lambda: self._call("get_model_config", name), None)
        if got is None:
            return None
        if self.protocol == "grpc":
            return got.config
        return json_format.ParseDict(got, mc.ModelConfig(), ignore_unknown_fields=True)

    # ------------------------------------------------------------ explicit model control
    def load(self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None) -> None:
        """Load (or reload) ``name``, optionally with a JSON model config override.

        ``files`` (``{"file:<version>/<name>": bytes}``, needs ``config_json``) are Triton's file override:
        the model is loaded from these bytes instead of the repository, under any name.

        Raises:
            ToolError: the server refused (the message carries Triton's reason) or is unreachable.
        """
        self._control("load_model", name, config=config_json, **({"files": files} if files else {}))

    def unload(self, name: str) -> None:
        """Unload ``name``.

        Raises:
            ToolError: the server refused (the message carries Triton's reason) or is unreachable.
        """
        self._control("unload_model", name)

    def _control(self, method: str, name: str, **kwargs: Any) -> None:
        from tritonclient.utils import InferenceServerException

        verb = method.removesuffix("_model")
        try:
            self._call(method, name, long=True, **kwargs)
        except InferenceServerException as e:
            # gRPC reports a refused connection as an exception with status UNAVAILABLE.
            if "UNAVAILABLE" not in str(e.status()):
                raise ToolError(
                    f"Triton at {self.url} refused to {verb} model '{name}'",
                    fix="start tritonserver with --model-control-mode=explicit and the shipped repository, and read its log",
                    details={"reason": e.message()},
                ) from None
            self._unreachable(e)
        except OSError as e:
            self._unreachable(e)

    def _unreachable(self, e: Exception) -> None:
        raise ToolError(
            f"cannot reach Triton at {self.url} over {self.protocol}",
            fix="check the server address, its port for this protocol, and that it is running",
            details={"error": str(e).strip()},
        ) from None


_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}


_gevent_quieted = False  # Hub.print_exception is wrapped once per process


def _quiet_gevent_interrupts() -> None:
    """A Ctrl-C that lands while gevent's hub runs (tritonclient.http's event loop) is still raised in the main
    greenlet, and our one "interrupted" line says so; gevent would first print its traceback and a timestamp."""
    global _gevent_quieted
    from gevent.hub import Hub

    if _gevent_quieted:
        return
    printer = Hub.print_exception

    def print_exception(self: Hub, context: Any, kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            printer(self, context, kind, value, tb)

    Hub.print_exception = print_exception
    _gevent_quieted = True


def _rest_json(msg: Any) -> dict[str, Any]:
    """A gRPC response as the REST API writes it: every field present (zeros too), 64-bit counters as numbers.

    protobuf's JSON mapping omits zero fields and writes 64-bit integers as strings; Triton's REST
    statistics do neither, and callers read ``["fail"]["count"]`` whichever protocol they used.
    """
    d = json_format.MessageToDict(msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return _numbers(msg.DESCRIPTOR, d)


def _numbers(desc: Descriptor, d: dict[str, Any]) -> dict[str, Any]:
    for f in desc.fields:
        if f.name not in d:
            continue
        v = d[f.name]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            d[f.name] = {k: _value(value_field, x) for k, x in v.items()}
        elif isinstance(v, list):  # repeated (FieldDescriptor.label is gone in protobuf 7)
            d[f.name] = [_value(f, x) for x in v]
        else:
            d[f.name] = _value(f, v)
    return d


def _value(f: FieldDescriptor, v: Any) -> Any:
    if f.message_type is not None:
        return _numbers(f.message_type, v)
    return int(v) if f.type in _INT64 else v


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
