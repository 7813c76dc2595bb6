"""A running tritonserver: free loopback ports, readiness, and a stop that always happens.

Depends on :mod:`~pipeline.serving.install` (what to run) and :mod:`~pipeline.serving.client`
(readiness over Triton's own protocol); :mod:`~pipeline.serving.tritonserver` builds on it.

The server runs in its own process group with its python-backend stubs; stopping
kills the group. PR_SET_PDEATHSIG and a watchdog process cover the case where the
bench process itself is SIGKILLed and no Python code runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Set as AbstractSet
from pathlib import Path
from types import FrameType, TracebackType

from pipeline.core.errors import ToolError
from pipeline.serving.client import TritonClient, metrics_text
from pipeline.serving.install import (
    TritonInstall,
    backend_dir,
    error_lines,
    locate_tritonserver,
    server_env,
)

# Per readiness call while the server starts: it answers at once or not at all (refused connection).
_POLL_TIMEOUT_S = 2.0
# Triton joins its metrics thread on exit, which sleeps for this interval (its default: 2000 ms), so a stop waited out
# up to that long; polling /proc every 100 ms costs nothing a bench can see.
_METRICS_INTERVAL_MS = 100
# What the embedded server's /metrics leaves out, for every report to state (Triton's defaults otherwise).
METRICS_LIMITS = (
    "GPU metrics off (--allow-gpu-metrics=false): the stand-in runs on the CPU, so no nv_gpu_* figures",
    "latency summaries off (Triton's default): the cumulative nv_inference_* counters give every delta",
    f"nv_cpu_utilization and nv_cpu_memory_used_bytes are host-wide, polled every {_METRICS_INTERVAL_MS} ms "
    "(--metrics-interval-ms): the server's own memory is its RSS, sampled with psutil",
)


def free_port(avoid: AbstractSet[int] = frozenset()) -> int:
    """A loopback TCP port that is free now (the kernel picks one; ``avoid`` is skipped)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def set_pdeathsig() -> None:
    """In the child: die with SIGKILL if the parent dies, even if it is SIGKILLed itself."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the server's process group (server + python-backend stubs), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # Stubs outlive a SIGTERMed server for a moment; make sure none of the group is left.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    # A SIGKILLed JVM takes a moment to tear down its memory: return once it is gone (or a zombie), so the caller's
    # "no server left" holds when it returns, and ports are free for the next server.
    deadline = time.monotonic() + 5.0
    while _live_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _live_members(pgid: int) -> list[int]:
    """PIDs in process group ``pgid`` that are not zombies (killpg(pgid, 0) would count zombies too)."""
    import psutil  # as serving/memory.py samples the server's processes

    live = []
    for p in psutil.process_iter(["status"]):
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                live.append(p.pid)
    return live


_SIGNAL_CAUGHT = re.compile(r"Signal \((\d+)\) received")
# A python-backend stub names its shared memory <shm-region-prefix-name><uuid4>: matching the uuid's first group too
# keeps the prefix of port 3329 from taking the regions of port 33295.
_STUB_REGION = r"[0-9a-f]{8}-[0-9a-f]{4}-"
_WATCHDOG = (
    "import os, re, signal, sys\n"
    "sys.stdin.buffer.read()  # EOF when the bench process exits, however it exits\n"
    "try:\n    os.killpg(int(sys.argv[1]), signal.SIGKILL)\nexcept OSError:\n    pass\n"
    "# The python backend's shared memory, which stubs remove only when they exit cleanly.\n"
    "own = re.compile(re.escape(sys.argv[2]) + sys.argv[3]) if len(sys.argv) > 3 else None\n"
    "for name in os.listdir('/dev/shm') if own else ():\n"
    "    if own.match(name):\n"
    "        try:\n            os.unlink(os.path.join('/dev/shm', name))\n        except OSError:\n            pass\n"
)


def stub_regions(prefix: str) -> list[Path]:
    """The shared-memory regions of the python-backend stubs of the server started with ``shm-region-prefix-name=prefix``."""
    own = re.compile(re.escape(prefix) + _STUB_REGION)
    return [p for p in Path("/dev/shm").glob(prefix + "*") if own.match(p.name)]


class _Interrupted(KeyboardInterrupt):
    """Raised from the SIGTERM handler so ``with`` blocks unwind and stop the server."""


class Watchdog:
    """A separate process that SIGKILLs process group ``pgid`` when this process dies, however it dies.

    PR_SET_PDEATHSIG covers a server's first process only; its children (python-backend stubs, TorchServe's JVM and
    workers) are reparented when it dies and do not always exit. The watchdog holds the read end of a pipe whose write
    end only we hold (non-inheritable): our death, even by SIGKILL, closes it; it reads EOF and kills the whole group.
    """

    def __init__(self, pgid: int, shm_prefix: str = "") -> None:
        """``shm_prefix``: the group's python-backend shared-memory prefix, whose regions it removes after the kill."""
        r, w = os.pipe()
        args = [str(pgid), shm_prefix, _STUB_REGION] if shm_prefix else [str(pgid)]
        self.proc: subprocess.Popen | None = subprocess.Popen([sys.executable, "-c", _WATCHDOG, *args], stdin=r, start_new_session=True, close_fds=True)
        os.close(r)
        self._fd: int | None = w

    def stop(self) -> None:
        """Stop it before the group is reaped, so it can never signal a recycled group id (safe to call twice)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class SignalGuard:
    """While installed (main thread only), SIGTERM and SIGHUP raise :class:`_Interrupted`.

    SIGTERM (e.g. `dvc` or CI cancelling) would end Python without running ``__exit__``; as an exception it unwinds the
    ``with`` blocks, which stop the servers.
    """

    def __init__(self) -> None:
        self._old: dict[signal.Signals, Callable[[int, FrameType | None], object] | int | None] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._raise)

    @staticmethod
    def _raise(signum: int, frame: FrameType | None) -> None:
        raise _Interrupted(f"received signal {signum}")

    def restore(self) -> None:
        for sig, old in self._old.items():
            if old is None:  # the previous handler was not installed from Python: nothing to put back
                continue
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, old)
        self._old.clear()


class ServerProcess:
    """What a server started here holds until it ends: its process group, the :class:`Watchdog` that kills the group
    if this process dies, the :class:`SignalGuard` installed while it runs, and a temp dir. ``stop`` or the end of
    the ``with`` block ends them."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._watchdog: Watchdog | None = None
        self._signals = SignalGuard()

    def _stop_group(self) -> None:
        """The watchdog first (so it can never signal a recycled group id), then the group; safe to call twice, and
        again after a new start (a stopped watchdog stays stopped)."""
        if self._watchdog is not None:
            self._watchdog.stop()
        if self.proc is not None:
            kill_group(self.proc, self._stop_grace_s())

    def _stop_grace_s(self) -> float:
        """How long SIGTERM is given before SIGKILL."""
        return 10.0

    def stop(self) -> None:
        """Stop the server and every process it started; safe to call twice."""
        self._stop_group()
        self._signals.restore()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class EmbeddedServer(ServerProcess):
    """A tritonserver on free loopback ports, serving one model; always stopped on exit.

    Usage::

        with EmbeddedServer(repo, "minilm", config_name="latency") as srv:
            srv.http_url  # "127.0.0.1:PORT"

    Raises (on enter):
        ToolError: the server exits or the model is not ready within ``timeout_s``;
        the message carries the server's error lines.
    """

    def __init__(
        self,
        repo_dir: str | os.PathLike[str],
        model: str,
        config_name: str | None = None,
        timeout_s: float = 120.0,
        log_dir: str | os.PathLike[str] | None = None,
        ports: tuple[int, int, int] | None = None,
        also_load: tuple[str, ...] = (),
        ort_standin: bool = False,
    ) -> None:
        super().__init__()
        self.repo_dir = Path(repo_dir).resolve()
        self.model = model  # "" loads nothing at start: the caller loads through the repository API (cold start)
        self.also_load = also_load  # more models served beside ``model`` (all must become ready)
        # Serve shipped onnxruntime configs as they are, through native/pipeline_ort installed under that backend's name.
        self.ort_standin = ort_standin
        self.config_name = config_name
        self.cache_bytes = 0  # with_cache()
        self.timeout_s = timeout_s
        self.requested_ports = ports
        self._log_dir = Path(log_dir) if log_dir else None
        self.log_path: Path | None = None
        self.http_port = self.grpc_port = self.metrics_port = 0
        # time.monotonic() at the spawn of the server that came up, and when it (and its models) answered ready
        self.spawned_at = self.ready_at = 0.0

    def with_cache(self, size_bytes: int) -> EmbeddedServer:
        """Start with Triton's local response cache of ``size_bytes`` (0: none): without one, a config's
        ``response_cache { enable: true }`` loads and caches nothing."""
        self.cache_bytes = size_bytes
        return self

    @property
    def models(self) -> tuple[str, ...]:
        """The models loaded at start."""
        return tuple(m for m in (self.model, *self.also_load) if m)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def client(self, protocol: str = "http") -> TritonClient:
        """A :class:`TritonClient` for this server over ``protocol`` (http or grpc); close it when done."""
        return TritonClient(self.grpc_url if protocol == "grpc" else self.http_url, protocol)

    def log(self) -> str:
        """The server's output so far."""
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def _pick_ports(self) -> tuple[int, int, int]:
        """Requested ports where free; any taken one is replaced by a free one."""
        chosen: list[int] = []
        for p in self.requested_ports or (0, 0, 0):
            chosen.append(p if p and port_free(p) and p not in chosen else free_port(set(chosen)))
        return chosen[0], chosen[1], chosen[2]

    def _command(self, inst: TritonInstall) -> list[str]:
        cmd = [
            str(inst.binary),
            f"--model-repository={self.repo_dir}",
            f"--backend-directory={self._backends(inst)}",
            "--model-control-mode=explicit",
            *(f"--load-model={m}" for m in self.models),
            "--strict-model-config=true",
            "--exit-on-error=true",  # a model that fails to load ends the server: we report at once
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            f"--metrics-interval-ms={_METRICS_INTERVAL_MS}",
            # Nothing is in flight when we stop a server, and the wait for unloads polls once a second: exit at once.
            # python-backend stubs leave their shared memory then, removed by stop() (the prefix is ours alone).
            "--exit-timeout-secs=0",
            # Other servers on this machine may run python models: keep our shared-memory names apart.
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix()}",
        ]
        if self.config_name:
            cmd.append(f"--model-config-name={self.config_name}")
        if self.cache_bytes > 0:
            cmd += [f"--cache-config=local,size={self.cache_bytes}", f"--cache-directory={inst.caches}"]
        return cmd

    def _shm_prefix(self) -> str:
        """The python backend's shared-memory names for this server (one per process and HTTP port)."""
        return f"pipeline{os.getpid()}x{self.http_port}"

    def signals_caught(self) -> set[int]:
        """The signals tritonserver reported catching ("Signal (6) received.")."""
        return {int(n) for n in _SIGNAL_CAUGHT.findall(self.log())}

    def _stop_grace_s(self) -> float:
        # A tritonserver that caught SIGABRT or SIGSEGV hangs in its handler: a SIGTERM grace would only be waited out
        # (10 s, seen after the python-backend reload abort).
        return 0.0 if self.signals_caught() & {signal.SIGABRT, signal.SIGSEGV} else super()._stop_grace_s()

    def _stop_group(self) -> None:
        """Stop the group, then remove the shared memory its python-backend stubs left (see ``--exit-timeout-secs``)."""
        super()._stop_group()
        if self.http_port:
            for leftover in stub_regions(self._shm_prefix()):
                leftover.unlink(missing_ok=True)

    def _backends(self, inst: TritonInstall) -> Path:
        if not self.ort_standin:
            return backend_dir(inst)
        from pipeline.serving.native_backend import onnxruntime_backend_dir

        return onnxruntime_backend_dir(inst)

    def _env(self, inst: TritonInstall) -> dict[str, str]:
        if not self.ort_standin:
            return server_env(inst)
        from pipeline.serving.native_backend import standin_env

        return {**server_env(inst), **standin_env()}

    def __enter__(self) -> EmbeddedServer:
        inst = locate_tritonserver()
        self._signals.install()
        try:
            self._start(inst, attempts=3)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, inst: TritonInstall, attempts: int) -> None:
        if self._log_dir:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            log_root = self._log_dir
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="tritonserver-")
            log_root = Path(self._tmp.name)
        for attempt in range(attempts):
            self.http_port, self.grpc_port, self.metrics_port = self._pick_ports()
            self.log_path = log_root / f"tritonserver-{self.config_name or self.model or 'empty'}-{attempt}.log"
            with open(self.log_path, "wb") as out:
                self.spawned_at = time.monotonic()
                self.proc = subprocess.Popen(
                    self._command(inst),
                    env=self._env(inst),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stubs die with it in stop()
                    preexec_fn=set_pdeathsig,  # noqa: PLW1509 - needed so a SIGKILLed stage leaves no server
                )
            self._watchdog = Watchdog(self.proc.pid, self._shm_prefix())
            ready = self._wait_ready()
            if ready:
                self.ready_at = time.monotonic()
                return
            log = self.log()
            # The wheel's tritonserver sometimes aborts while it starts (SIGABRT in its gRPC event engine, "epoll_wait
            # error: Bad file descriptor"), before any model is ready: an upstream fault, not the repository. Once more.
            if self.proc.poll() == -signal.SIGABRT and attempt + 1 < attempts:
                print(f"note: tritonserver aborted while starting (SIGABRT; log {self.log_path}): starting it again", file=sys.stderr)
                self._stop_group()
                continue
            # Another process grabbed a port between our check and the bind: try new ports.
            low = log.lower()
            if "address already in use" in low or ("failed to start" in low and "port" in low):
                self._stop_group()
                self.requested_ports = None
                continue
            raise ToolError(
                "tritonserver could not load model " + ", ".join(f"'{m}'" for m in self.models) + (f" with --model-config-name={self.config_name}" if self.config_name else ""),
                fix="read the server log lines below; the model config or the model file is wrong",
                details={
                    "exit code": self.proc.returncode,
                    "repository": self.repo_dir,
                    "server log (errors)": "\n    " + "\n    ".join(error_lines(log) or log.splitlines()[-15:]),
                    "full log": self.log_path,
                },
            )
        raise ToolError(
            f"tritonserver could not bind free ports after {attempts} attempts",
            fix="free some loopback ports or set bench ports explicitly",
            details={"last log": "\n".join(error_lines(self.log()))},
        )

    def _wait_ready(self) -> bool:
        """Poll server and model readiness; False if the server exits or time runs out."""
        assert self.proc is not None
        proc = self.proc
        deadline = time.monotonic() + self.timeout_s
        with TritonClient(self.http_url, "http", timeout_s=_POLL_TIMEOUT_S) as client:
            if not client.wait_ready(self.models, self.timeout_s, is_alive=lambda: proc.poll() is None, poll_s=0.05):
                return False
        # Triton starts its metrics endpoint after HTTP: a scrape right after "ready" could find nothing listening.
        while metrics_text(f"127.0.0.1:{self.metrics_port}", timeout_s=_POLL_TIMEOUT_S) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True
