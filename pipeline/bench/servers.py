"""Where the bench sends requests: an embedded tritonserver, or an external full Triton.

Both yield a :class:`Target` per variant: the URLs, the model name and the server
description every report carries.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.serving.embedded import (
    CHANGED_FIELDS,
    build_embedded_repository,
    variant_model,
    write_config,
)
from pipeline.serving.process import EmbeddedServer
from pipeline.core.errors import BenchError

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

    http_url: str
    perf_url: str  # what perf_analyzer -u gets (HTTP or gRPC endpoint)
    model: str
    variant: str
    version: str = ""
    metrics_url: str = ""  # Triton's /metrics host:port (embedded python stand-in: carries its ORT timers)


def server_version(http_url: str) -> str:
    """Triton's version from its metadata endpoint."""
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2", timeout=5) as r:  # noqa: S310
            return str(json.load(r).get("version", ""))
    except (urllib.error.URLError, OSError, ValueError):
        return ""


class EmbeddedMode:
    """Serve each variant from a generated stand-in repository (native or python backend)."""

    mode = "embedded"

    def __init__(self, model_dir: Path, protocol: str, timeout_s: float, log_dir: Path, backend: str = "native") -> None:
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

    def add_variant(self, name: str, cfg: mc.ModelConfig) -> None:
        """A tuning candidate: the embedded config of another variant with new scheduling values."""
        write_config(self.repo / self.shipped.name / "configs" / f"{name}.pbtxt", cfg)

    def embedded_config(self, variant: str) -> mc.ModelConfig:
        from pipeline.serving.embedded import read_config

        return read_config(self.repo / self.shipped.name / "configs" / f"{variant}.pbtxt")

    def _targets(self, srv: EmbeddedServer, models: dict[str, str]) -> dict[str, Target]:
        """A Target per variant (variant -> model name) on the running server ``srv``."""
        url = srv.grpc_url if self.protocol == "grpc" else srv.http_url
        # Only the python stand-in publishes timers; for the native backend Triton's own stats say it all.
        ver, metrics = server_version(srv.http_url), f"127.0.0.1:{srv.metrics_port}" if self.backend == "python" else ""
        return {v: Target(srv.http_url, url, m, v, ver, metrics) for v, m in models.items()}

    @contextlib.contextmanager
    def serve(self, variant: str) -> Iterator[Target]:
        with EmbeddedServer(self.repo, self.shipped.name, variant, timeout_s=self.timeout_s, log_dir=self.log_dir) as srv:
            yield self._targets(srv, {variant: self.shipped.name})[variant]

    @contextlib.contextmanager
    def serve_together(self, variants: list[str]) -> Iterator[dict[str, Target]]:
        """One server holding every variant as a model of its own: switching between them costs nothing.

        The paired throughput rounds alternate between variants within seconds; separate
        servers would put a restart (and this VM's drift) between the two numbers compared.
        """
        models = {v: variant_model(self.shipped.name, v) for v in variants}
        names = list(models.values())
        with EmbeddedServer(self.repo, names[0], timeout_s=self.timeout_s, log_dir=self.log_dir, also_load=tuple(names[1:])) as srv:
            yield self._targets(srv, models)

    def close(self) -> None:
        self._tmp.cleanup()


class ExternalMode:
    """A running full Triton (e.g. the NGC container) started with --model-control-mode=explicit.

    Each variant is loaded through the repository API with the shipped config as an
    override, so the server benchmarks the shipped repository's configs as they are.
    """

    mode = "external"
    # It may run the model on a GPU, where the server's time is no gauge for in-process CPU ORT.
    in_server_ort_key: str | None = None

    def __init__(self, url: str, model: str, configs: dict[str, Path], protocol: str, grpc_url: str | None = None) -> None:
        self.http_url = url.removeprefix("http://").rstrip("/")
        self.model, self.configs, self.protocol = model, configs, protocol
        self.grpc_url = grpc_url
        self.description = f"External Triton at {self.http_url} serving the shipped repository's configs as they are."

    def _post(self, path: str, body: dict) -> None:
        req = urllib.request.Request(f"http://{self.http_url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300):  # noqa: S310 - user-given server
                return
        except urllib.error.HTTPError as e:
            raise BenchError(
                f"the external Triton refused {path}",
                fix="start tritonserver with --model-control-mode=explicit and the shipped repository, or check bench.url",
                details={"status": e.code, "body": e.read().decode(errors="replace")[:500]},
            ) from None
        except (urllib.error.URLError, OSError) as e:
            raise BenchError(f"cannot reach the external Triton at {self.http_url}", fix="check bench.url", details={"error": e}) from None

    @contextlib.contextmanager
    def serve(self, variant: str) -> Iterator[Target]:
        from pipeline.serving.embedded import read_config

        cfg = read_config(self.configs[variant])
        # Triton accepts a JSON model config as a load-time override (repository extension).
        cfg_json = json_format.MessageToJson(cfg, preserving_proto_field_name=True)
        self._post(f"/v2/repository/models/{self.model}/load", {"parameters": {"config": cfg_json}})
        url = self.grpc_url if self.protocol == "grpc" and self.grpc_url else self.http_url
        yield Target(self.http_url, url, self.model, variant, server_version(self.http_url))

    def close(self) -> None:
        pass
