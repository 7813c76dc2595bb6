"""Where the bench sends requests: an embedded tritonserver, or an external full Triton.

Both yield a :class:`Target` per variant: the URLs, the model name and the server
description every report carries.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from google.protobuf import json_format

from pipeline.core.errors import BenchError, ToolError
from pipeline.serving.client import TritonClient, metrics_text
from pipeline.serving.embedded import (
    CHANGED_FIELDS,
    build_embedded_repository,
    read_config,
    variant_model,
)
from pipeline.serving.memory import RssSampler
from pipeline.serving.process import METRICS_LIMITS, EmbeddedServer

_STANDINS = {
    "native": "our native Triton backend pipeline_ort, which runs ONNX Runtime inside tritonserver (native/pipeline_ort)",
    "python": "a python-backend model that runs ONNX Runtime in the stub process (pipeline/serving/python_standin.py)",
}
# The served metric that is the stand-in's own time inside ONNX Runtime per request: Triton's compute infer for
# the native backend, the python stand-in's own timer (it also pays Python and IPC inside compute infer).
_ORT_TIME_KEYS = {"native": "server_compute_infer_ms", "python": "standin_ort_ms"}


def embedded_note(backend: str) -> str:
    """What an embedded-mode report says about the server that produced it."""
    return (
        f"Embedded tritonserver (nvidia-pytriton wheel) serving the shipped ONNX file through {_STANDINS[backend]} - "
        "a stand-in for Triton's onnxruntime backend, which the wheel lacks - with the shipped config's scheduling "
        "(max_batch_size, dynamic_batching, instance_group, inputs, outputs, ORT thread counts, graph level) unchanged; "
        "changed fields: " + ", ".join(CHANGED_FIELDS[backend]) + "."
    )


@dataclass
class Target:
    """A live server with one variant loaded."""

    http_url: str  # the HTTP endpoint ("" for an external server given by its gRPC endpoint only)
    perf_url: str  # the endpoint of ``protocol``: what perf_analyzer -u gets
    model: str
    variant: str
    version: str = ""
    metrics_url: str = ""  # Triton's /metrics host:port ("" when there is none)
    protocol: str = "http"  # of perf_url (bench.protocol)
    standin_timers: bool = False  # /metrics also carries the python stand-in's own ORT timers
    memory: RssSampler | None = None  # the server's RSS, sampled all along (embedded only)
    grpc_url: str = ""  # the gRPC endpoint (the open-loop client's)
    server: Any = None  # the embedded EmbeddedServer (None: external), so a run that failed can tell a dead server apart

    def check_alive(self) -> None:
        """Raise if our own embedded server exited: every later measurement would be INVALID for that one reason.

        Raises:
            ToolError: with the exit code and the server log's last error lines.
        """
        proc = getattr(self.server, "proc", None)
        if proc is None or proc.poll() is None:
            return
        from pipeline.serving.install import error_lines

        raise ToolError(
            f"the bench's own tritonserver exited (code {proc.returncode}) while measuring variant '{self.variant}'",
            fix="read its log (below, and in the bench's logs directory): a crashed backend or the machine's OOM killer; then rerun",
            details={"log": "\n".join(error_lines(self.server.log())) or "(empty)"},
        )

    def client(self) -> TritonClient:
        """A client for this server over the bench's protocol (statistics work over either)."""
        return TritonClient(self.perf_url, self.protocol)


class EmbeddedMode:
    """Serve each variant from a generated stand-in repository (native or python backend)."""

    mode = "embedded"

    def __init__(self, model_dir: Path, protocol: str, timeout_s: float, log_dir: Path, backend: str = "native", memory_sample_s: float = 0.2) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-embedded-")
        self.repo = Path(self._tmp.name)
        try:
            self.shipped, self.changes = build_embedded_repository(model_dir, self.repo, backend)
        except BaseException:
            self._tmp.cleanup()
            raise
        self.backend = backend
        self.description = embedded_note(backend)
        self.in_server_ort_key: str | None = _ORT_TIME_KEYS[backend]
        self.protocol, self.timeout_s, self.log_dir = protocol, timeout_s, log_dir
        self.memory_sample_s = memory_sample_s
        self.traces: list[tuple[str, RssSampler]] = []  # every server's RSS samples, by what it served
        self.metrics_limits = list(METRICS_LIMITS)

    def _targets(self, srv: EmbeddedServer, models: dict[str, str], mem: RssSampler) -> dict[str, Target]:
        """A Target per variant (variant -> model name) on the running server ``srv``."""
        url = srv.grpc_url if self.protocol == "grpc" else srv.http_url
        with srv.client(self.protocol) as client:
            ver = client.server_version()
        metrics = f"127.0.0.1:{srv.metrics_port}"
        return {v: Target(srv.http_url, url, m, v, ver, metrics, str(self.protocol), self.backend == "python", mem, srv.grpc_url, srv) for v, m in models.items()}

    @contextlib.contextmanager
    def sampled(self, srv: EmbeddedServer, label: str) -> Iterator[RssSampler]:
        """The RSS of ``srv`` (and its stubs) sampled while it runs, kept in :attr:`traces` under ``label``."""
        assert srv.proc is not None
        with RssSampler(srv.proc.pid, self.memory_sample_s) as mem:
            self.traces.append((label, mem))
            yield mem

    @contextlib.contextmanager
    def serve(self, variant: str) -> Iterator[Target]:
        with EmbeddedServer(self.repo, self.shipped.name, variant, timeout_s=self.timeout_s, log_dir=self.log_dir) as srv, self.sampled(srv, variant) as mem:
            yield self._targets(srv, {variant: self.shipped.name}, mem)[variant]

    @contextlib.contextmanager
    def serve_together(self, variants: list[str]) -> Iterator[dict[str, Target]]:
        """One server holding every variant as a model of its own: switching between them costs nothing.

        The paired throughput rounds alternate between variants within seconds; separate
        servers would put a restart (and this VM's drift) between the two numbers compared.
        """
        models = {v: variant_model(self.shipped.name, v) for v in variants}
        names = list(models.values())
        with EmbeddedServer(self.repo, names[0], timeout_s=self.timeout_s, log_dir=self.log_dir, also_load=tuple(names[1:])) as srv, self.sampled(srv, " + ".join(variants)) as mem:
            yield self._targets(srv, models, mem)

    def close(self) -> None:
        self._tmp.cleanup()


class ExternalMode:
    """A running full Triton (e.g. the NGC container) started with --model-control-mode=explicit.

    Each variant is loaded through the repository API with the shipped config as an
    override, so the server benchmarks the shipped repository's configs as they are.
    ``url`` is the server's endpoint for ``protocol``: its HTTP port for ``http``, its gRPC
    port for ``grpc``; control, metadata and perf_analyzer all use that one endpoint.
    """

    mode = "external"
    # It may run the model on a GPU, where the server's time is no gauge for in-process CPU ORT.
    in_server_ort_key: str | None = None

    def __init__(self, url: str, model: str, configs: dict[str, Path], protocol: str = "http", metrics_url: str | None = None) -> None:
        self.client = TritonClient(url, str(protocol))
        self.url, self.protocol = self.client.url, self.client.protocol
        self.http_url = self.url if self.protocol == "http" else ""
        self.model, self.configs = model, configs
        self.description = f"External Triton at {self.url} ({self.protocol}) serving the shipped repository's configs as they are."
        # Triton's default metrics port on the server's host unless told (bench.metrics_url).
        self.metrics_url = metrics_url or f"{self.url.rsplit(':', 1)[0]}:8002"
        reachable = metrics_text(self.metrics_url) is not None
        self.metrics_limits = (
            []
            if reachable
            else [
                f"Triton's /metrics at {self.metrics_url} is off or unreachable: no Triton metrics deltas, no GPU figures "
                "(start tritonserver with --allow-metrics=true, or set bench.metrics_url); everything else was measured"
            ]
        )
        if not reachable:
            self.metrics_url = ""

    @contextlib.contextmanager
    def serve(self, variant: str) -> Iterator[Target]:
        """Load ``variant``'s shipped config as an override and yield the target.

        Raises:
            BenchError: the server is unreachable or refused the load (with Triton's reason).
        """
        cfg = read_config(self.configs[variant])
        # Triton accepts a JSON model config as a load-time override (repository extension).
        cfg_json = json_format.MessageToJson(cfg, preserving_proto_field_name=True)
        try:
            self.client.load(self.model, cfg_json)
        except ToolError as e:
            raise BenchError(
                f"the external Triton did not load the '{variant}' config: {e.what}",
                fix="start tritonserver with --model-control-mode=explicit and the shipped repository, "
                "and check bench.url and bench.protocol (the url is the endpoint of that protocol)",
                details=e.details,
            ) from None
        yield Target(self.http_url, self.url, self.model, variant, self.client.server_version(), self.metrics_url, self.protocol)

    def close(self) -> None:
        self.client.close()


Mode = EmbeddedMode | ExternalMode  # where a bench run sends its requests
