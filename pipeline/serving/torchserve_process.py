"""A running TorchServe: free loopback ports, its management API, and a stop that always happens.

``torchserve --start --foreground`` runs in a process group of its own, in a private temp directory (TorchServe
keeps its pid file, its workers' Unix sockets and the unpacked archives there, so two servers never meet).
Its Java frontend spawns one Python worker per model worker, all in that group: stopping kills the group.
PR_SET_PDEATHSIG on the launcher and a watchdog process (the same guard tritonserver gets in
:mod:`~pipeline.serving.process`) cover a stage that is SIGKILLed and runs no Python at all.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

from pipeline.core.errors import ToolError
from pipeline.serving.process import ServerProcess, Watchdog, free_port, port_free, set_pdeathsig
from pipeline.serving.torchserve import LOG4J2, TorchServeInstall, config_properties

PORTS = ("inference", "management", "metrics", "grpc_inference", "grpc_management")
_ERROR_WORDS = ("error", "exception", "traceback", "failed", "raise ")


def multipart(body: bytes, name: str = "data") -> tuple[bytes, str]:
    """``body`` as one multipart/form-data part ``name``: what perf_analyzer's torchserve client sends."""
    boundary = uuid.uuid4().hex
    data = (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n').encode() + body + f"\r\n--{boundary}--\r\n".encode()
    return data, f"multipart/form-data; boundary={boundary}"


def _connect_no_delay(conn: http.client.HTTPConnection) -> None:
    """Open ``conn`` with Nagle's algorithm off, as perf_analyzer's client does: no delay before a small request."""
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class TorchServeServer(ServerProcess):
    """TorchServe on free loopback ports with an empty model store; models are registered through the management API.

    Usage::

        with TorchServeServer(inst, store, logs) as ts:
            seconds = ts.register("tiny_latency", "tiny_latency.mar", batch_size=1, max_batch_delay_ms=0, workers=1)
            status, body = ts.predict("tiny_latency", b'{"x": [[...]]}')

    Raises (on enter):
        ToolError: the server exits or does not answer /ping within ``timeout_s``; the message carries its log.
    """

    def __init__(
        self,
        inst: TorchServeInstall,
        model_store: Path,
        log_dir: Path,
        timeout_s: float = 120.0,
        ports: dict[str, int] | None = None,
        label: str = "torchserve",
        pythonpath: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.inst, self.model_store, self.log_dir, self.timeout_s, self.label = inst, model_store.resolve(), log_dir, timeout_s, label
        self.pythonpath = list(pythonpath or [])  # where the workers import a handler's model code from (a native model's factory)
        self.extra_env = dict(env or {})  # for the JVM and its workers (e.g. OpenMP's wait policy)
        self.requested_ports = dict(ports or {})
        self.ports: dict[str, int] = {}
        self._conns: dict[str, http.client.HTTPConnection] = {}
        self.spawned_at = self.ready_at = 0.0

    # ------------------------------------------------------------ addresses and logs
    @property
    def inference_url(self) -> str:
        """``127.0.0.1:PORT`` of the inference API (what perf_analyzer -u gets)."""
        return f"127.0.0.1:{self.ports['inference']}"

    @property
    def server_log(self) -> Path:
        return self.log_dir / f"{self.label}.log"

    def model_log(self) -> str:
        """The workers' output so far (handler logs, tracebacks)."""
        p = self.log_dir / self.label / "model_log.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def log_excerpt(self, limit: int = 15) -> list[str]:
        """The worker log lines that explain a failure (tracebacks and errors), the last ``limit`` of them."""
        lines = [ln.rstrip() for ln in self.model_log().splitlines()]
        hits = [ln for ln in lines if any(w in ln.lower() for w in _ERROR_WORDS)]
        return (hits or lines)[-limit:]

    def java_pid(self) -> int | None:
        """The Java frontend's pid (the launcher's child): its RSS and its workers' are the server's memory."""
        import psutil

        if self.proc is None:
            return None
        with contextlib.suppress(psutil.Error):
            kids = psutil.Process(self.proc.pid).children()
            return next((k.pid for k in kids if "java" in k.name()), None)
        return None

    # ------------------------------------------------------------ start and stop
    def _pick_ports(self) -> dict[str, int]:
        chosen: dict[str, int] = {}
        for k in PORTS:
            p = self.requested_ports.get(k, 0)
            ok = p and port_free(p) and p not in chosen.values()
            chosen[k] = p if ok else free_port(set(chosen.values()))
        return chosen

    def __enter__(self) -> TorchServeServer:
        self._signals.install()
        try:
            self._start(attempts=3)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, attempts: int) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.model_store.mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.TemporaryDirectory(prefix="torchserve-")
        tmp = Path(self._tmp.name)
        (tmp / "log4j2.xml").write_text(LOG4J2)
        logs = self.log_dir / self.label
        logs.mkdir(parents=True, exist_ok=True)
        env = self.inst.env() | {"TMPDIR": str(tmp), "TEMP": str(tmp), "LOG_LOCATION": str(logs), "METRICS_LOCATION": str(logs)}
        env |= self.extra_env
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        for _ in range(attempts):
            self.ports = self._pick_ports()
            (tmp / "config.properties").write_text(config_properties(self.ports, self.model_store))
            cmd = [
                str(self.inst.torchserve),
                "--start",
                "--foreground",
                "--ncs",
                "--disable-token-auth",
                "--enable-model-api",
                "--model-store",
                str(self.model_store),
                "--ts-config",
                str(tmp / "config.properties"),
                "--log-config",
                str(tmp / "log4j2.xml"),
            ]
            with open(self.server_log, "ab") as out:
                self.spawned_at = time.monotonic()
                self.proc = subprocess.Popen(cmd, env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=set_pdeathsig)  # noqa: PLW1509 - a SIGKILLed stage must leave no server
            self._watchdog = Watchdog(self.proc.pid)
            if self._wait_ready():
                self.ready_at = time.monotonic()
                return
            log = self._log_text()
            self._stop_group()
            if "address already in use" in log.lower() or "bindexception" in log.lower():
                self.requested_ports = {}  # another process took a port between our check and the bind: new ones
                continue
            raise ToolError(
                f"TorchServe did not start ({self.label}) within {self.timeout_s:.0f} s",
                fix="read the server log lines below (a Java or port problem), or raise bench.server_timeout_s",
                details={"exit code": self.proc.returncode, "server log": "\n    " + "\n    ".join(log.splitlines()[-15:]), "full log": self.server_log},
            )
        raise ToolError(
            f"TorchServe could not bind free loopback ports after {attempts} attempts",
            fix="free some loopback ports",
            details={"last log": "\n".join(self._log_text().splitlines()[-10:])},
        )

    def _log_text(self) -> str:
        return self.server_log.read_text(errors="replace") if self.server_log.exists() else ""

    def _wait_ready(self) -> bool:
        """Poll /ping until TorchServe answers Healthy; False if it exits or time runs out."""
        assert self.proc is not None
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.ping():
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        """Stop the launcher, the JVM and every worker; safe to call twice."""
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        super().stop()

    # ------------------------------------------------------------ HTTP: management, inference, metrics
    def _request(self, api: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout_s: float = 60.0) -> tuple[int, bytes]:
        """One request on a kept-alive connection to ``api``; once more on a new one if a kept connection had gone stale."""
        for _ in range(2):
            conn, fresh = self._conns.get(api), api not in self._conns
            try:
                if conn is None:
                    conn = self._conns[api] = http.client.HTTPConnection("127.0.0.1", self.ports[api], timeout=timeout_s)
                if conn.sock is None:  # new, or closed by a "Connection: close" answer
                    _connect_no_delay(conn)
                conn.sock.settimeout(timeout_s)
                conn.request(method, path, body=body, headers=headers or {})
                r = conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                self._conns.pop(api, None)
                if fresh:  # a new connection failed: the server is not answering (a request is never sent twice)
                    raise
        raise AssertionError("unreachable")

    def register(self, name: str, mar: str, batch_size: int, max_batch_delay_ms: int, workers: int, timeout_s: float = 300.0) -> float:
        """Register ``mar`` (a file in the model store) with ``workers`` workers; seconds until TorchServe says they are up.

        Raises:
            ToolError: TorchServe refused it or its workers did not start (its message and the worker log excerpt).
        """
        q = urllib.parse.urlencode(
            {
                "url": mar,
                "model_name": name,
                "batch_size": batch_size,
                "max_batch_delay": max_batch_delay_ms,
                "initial_workers": workers,
                "synchronous": "true",
                "response_timeout": int(timeout_s),
            }
        )
        t = time.monotonic()
        try:
            status, body = self._request("management", "POST", f"/models?{q}", timeout_s=timeout_s)
        except (OSError, http.client.HTTPException) as e:
            status, body = 0, str(e).encode()
        seconds = time.monotonic() - t
        if status != 200:
            raise ToolError(
                f"TorchServe did not register {name} ({mar}): HTTP {status} {body.decode(errors='replace')[:300]}",
                fix="read the worker log excerpt: the handler failed to initialize (a model file or a setting), or raise bench.server_timeout_s",
                details={"worker log": "\n    " + "\n    ".join(self.log_excerpt())},
            )
        return seconds

    def describe(self, name: str) -> dict:
        """The management API's description of ``name`` (its workers, batch size, max batch delay)."""
        status, body = self._request("management", "GET", f"/models/{name}")
        return json.loads(body)[0] if status == 200 else {}

    def worker_pids(self, name: str) -> list[int]:
        return [int(w["pid"]) for w in self.describe(name).get("workers", []) if w.get("pid")]

    def ping(self) -> bool:
        """Whether the inference API answers Healthy (on the connection later requests reuse)."""
        try:
            status, body = self._request("inference", "GET", "/ping", timeout_s=5.0)
            return status == 200 and json.loads(body).get("status") == "Healthy"
        except (OSError, http.client.HTTPException, ValueError):
            return False

    def predict(self, name: str, body: bytes, timeout_s: float = 60.0) -> tuple[int, bytes]:
        """One request as perf_analyzer sends it (the body as multipart part ``data``): HTTP status and response body."""
        data, ctype = multipart(body)
        return self._request("inference", "POST", f"/predictions/{name}", data, {"Content-Type": ctype}, timeout_s)

    def metrics(self) -> dict[str, float]:
        """TorchServe's Prometheus counters: ``<name>`` for host-level ones, ``<name>|<model>`` per model."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            status, body = self._request("metrics", "GET", "/metrics", timeout_s=10.0)
        except (OSError, http.client.HTTPException):
            return {}
        out: dict[str, float] = {}
        if status != 200:
            return out
        for fam in text_string_to_metric_families(body.decode(errors="replace")):
            for s in fam.samples:
                model = s.labels.get("model_name") or s.labels.get("ModelName")
                name = s.name.removesuffix("_total")  # the parser names counter samples <name>_total
                out[f"{name}|{model}" if model else name] = s.value
        return out
