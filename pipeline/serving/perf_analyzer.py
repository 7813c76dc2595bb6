"""perf_analyzer from the tritonclient 2.51.0 wheel: locate, build a command, run, parse.

The wheel installs the binary as ``<prefix>/bin/perf_analyzer``. It links against
``libb64.so.0d`` (we link the copy bundled in ``nvidia_pytriton.libs`` under a
project cache dir, since the bundled file has a hashed name) and ``libcudart.so.12``
(from the nvidia-cuda-runtime-cu12 wheel). Building the command, running it and
parsing its CSV are separate functions so each can be tested on its own.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Mapping
from typing import IO
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.core.atomic import write_text
from pipeline.core.errors import ToolError
from pipeline.serving.install import cache_dir, site_packages
from pipeline.serving.process import set_pdeathsig

Feed = dict[str, np.ndarray]
_US = 1e-3  # CSV times are microseconds; we report milliseconds


@dataclass(frozen=True)
class PerfAnalyzer:
    """A runnable perf_analyzer: the binary and the library path it needs."""

    binary: Path
    lib_path: str

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [self.lib_path, env.get("LD_LIBRARY_PATH")]))
        return env


def _find_binary() -> Path | None:
    candidates = [Path(sysconfig.get_paths()["scripts"]) / "perf_analyzer", Path(sys.prefix) / "bin" / "perf_analyzer"]
    found = shutil.which("perf_analyzer")
    candidates += [Path(found)] if found else []
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def lib_dirs() -> list[str]:
    """Directories holding libb64.so.0d and libcudart.so.12, creating the libb64 link if needed."""
    dirs: list[str] = []
    links = cache_dir() / "perf-analyzer-libs"
    for sp in site_packages():
        cudart = sp / "nvidia" / "cuda_runtime" / "lib"
        if (cudart / "libcudart.so.12").exists():
            dirs.append(str(cudart))
        bundled = sorted((sp / "nvidia_pytriton.libs").glob("libb64-*.so.0d"))
        if bundled:
            link = links / "libb64.so.0d"
            if not link.exists() or link.resolve() != bundled[0].resolve():
                links.mkdir(parents=True, exist_ok=True)
                tmp = links / f".libb64.{os.getpid()}"
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(bundled[0])
                os.replace(tmp, link)  # atomic: concurrent runs never see a half-made link
            dirs.append(str(links))
    return list(dict.fromkeys(dirs))


def _missing_libs(binary: Path, lib_path: str) -> list[str]:
    """Shared libraries the dynamic loader cannot find for ``binary`` (from ldd)."""
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [lib_path, os.environ.get("LD_LIBRARY_PATH")])))
    try:
        out = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.split("=>")[0].strip() for ln in out.splitlines() if "not found" in ln]


_FIXES = {
    "libb64.so.0d": "install nvidia-pytriton (pip install --no-deps nvidia-pytriton==0.7.0, it bundles libb64) or apt-get install libb64-0d",
    "libcudart.so.12": "pip install nvidia-cuda-runtime-cu12",
}


def locate_perf_analyzer() -> PerfAnalyzer:
    """Find perf_analyzer and prove it starts (``--version``).

    Raises:
        ToolError: the binary is absent, a shared library is missing (named, with the
        package that provides it), or it does not run (e.g. glibc too old).
    """
    binary = _find_binary()
    if binary is None:
        raise ToolError(
            "perf_analyzer not found",
            fix="pip install 'tritonclient[http]==2.51.0' (the wheel ships bin/perf_analyzer; newer wheels need glibc 2.38)",
            details={"searched": f"{sysconfig.get_paths()['scripts']}, PATH"},
        )
    lib_path = os.pathsep.join(lib_dirs())
    missing = _missing_libs(binary, lib_path)
    if missing:
        raise ToolError(
            f"perf_analyzer cannot start: missing shared libraries {', '.join(missing)}",
            fix="; ".join(_FIXES.get(m, f"install the package providing {m}") for m in missing),
            details={"binary": binary, "LD_LIBRARY_PATH used": lib_path or "(empty)"},
        )
    pa = PerfAnalyzer(binary, lib_path)
    try:
        r = subprocess.run([str(binary), "--version"], env=pa.env(), capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise ToolError("perf_analyzer cannot be executed", details={"binary": binary, "error": e}) from None
    if "Perf Analyzer Version" not in r.stdout + r.stderr:
        raise ToolError(
            "perf_analyzer does not run",
            fix="tritonclient 2.52+ needs glibc 2.38: pin tritonclient[http]==2.51.0",
            details={"binary": binary, "exit code": r.returncode, "output": (r.stdout + r.stderr).strip()[-500:]},
        )
    return pa


# ---------------------------------------------------------------- input data
def _content(a: np.ndarray) -> list:
    """A tensor's values as perf_analyzer's JSON takes them: BYTES (numpy object) as strings."""
    if a.dtype == np.object_:
        return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in a.ravel()]
    return a.ravel().astype(bool).tolist() if a.dtype == np.bool_ else a.ravel().tolist()


def input_data_json(samples: list[Feed], batched: bool) -> dict:
    """perf_analyzer ``--input-data`` JSON from feed dicts, one step per batch-1 request.

    With ``batched`` (max_batch_size > 0) each sample row becomes its own step and the
    batch axis is left out of ``shape``, because perf_analyzer adds it (``-b``).
    """
    steps: list[dict] = []
    for feed in samples:
        rows = next(iter(feed.values())).shape[0] if batched else 1
        for r in range(rows):
            step = {}
            for name, arr in feed.items():
                a = np.asarray(arr)[r] if batched else np.asarray(arr)
                content = _content(a)
                step[name] = {"content": content, "shape": list(a.shape)}
            steps.append(step)
    if not steps:
        raise ToolError("no sample inputs to write for perf_analyzer", fix="check model.data / the samples hook")
    return {"data": steps}


def write_input_data(path: str | os.PathLike[str], samples: list[Feed], batched: bool) -> Path:
    """Write :func:`input_data_json` atomically and return the path."""
    write_text(path, json.dumps(input_data_json(samples, batched)))
    return Path(path)


# ---------------------------------------------------------------- command / run / parse
@dataclass
class PerfRun:
    """One perf_analyzer measurement at one concurrency."""

    concurrency: int
    command: list[str]
    returncode: int
    csv_text: str
    log: str
    row: dict[str, float] = field(default_factory=dict)  # parsed CSV row (ms / infer/s)

    @property
    def valid(self) -> bool:
        """perf_analyzer exits non-zero when it cannot get a stable window: then there is no number."""
        return self.returncode == 0 and bool(self.row)

    def reason(self) -> str:
        """Why an invalid run is invalid, from perf_analyzer's own output."""
        if self.valid:
            return ""
        tail = [ln for ln in self.log.splitlines() if ln.strip()][-3:]
        return f"exit {self.returncode}: " + " | ".join(tail)


@dataclass(frozen=True)
class PerfOptions:
    """How one perf_analyzer run loads the server and measures it.

    The load is one concurrency level (closed loop), or one request rate (open loop, ``--request-rate-range``), or one
    schedule of gaps between requests (``--request-intervals``, a file of microseconds per line): the schedule wins
    over the rate, the rate over the concurrency. ``shapes`` gives the dynamic dims (the input JSON's own shapes take
    over per step). ``service_kind="torchserve"``: the same load against TorchServe's inference API.
    """

    concurrency: int = 1
    request_rate: float | None = None
    request_intervals: Path | None = None
    protocol: str = "http"
    measurement_interval_ms: int = 3000
    stability_percentage: int = 10
    max_trials: int = 10
    shapes: Mapping[str, list[int]] = field(default_factory=dict)
    batch_size: int = 1
    service_kind: str = "triton"

    def deadline_s(self, cap_s: float) -> float:
        """How long a run of these options may take before it counts as hung: three times its longest stability
        search (``max_trials`` windows) plus a minute to connect and drain, at most ``cap_s``.

        A request the server never answers holds perf_analyzer forever; one such run must not take the stage's
        whole budget (and a CI job's timeout) with it.
        """
        return min(cap_s, 60.0 + 3 * self.max_trials * self.measurement_interval_ms / 1000)

    def load_args(self) -> list[str]:
        """The arguments that set the load."""
        # Open loop needs asynchronous requests: synchronous ones (the default) cap the rate at threads / latency,
        # which past capacity is a closed loop again.
        open_loop = ["--async", "--max-threads", "16"]
        if self.request_intervals is not None:
            return ["--request-intervals", str(self.request_intervals), *open_loop]
        if self.request_rate is not None:
            return ["--request-rate-range", f"{self.request_rate:.1f}:{self.request_rate:.1f}", "--request-distribution", "constant", *open_loop]
        return ["--concurrency-range", f"{self.concurrency}:{self.concurrency}"]


def build_command(pa: PerfAnalyzer, model: str, url: str, input_data: Path, csv_path: Path, opts: PerfOptions) -> list[str]:
    """The perf_analyzer argv for one run of ``opts`` against ``model`` at ``url``, sending ``input_data`` and writing
    its CSV to ``csv_path``.

    With ``opts.service_kind="torchserve"``, ``input_data`` names, per step, a file perf_analyzer sends as the request
    body (``TORCHSERVE_INPUT``), and the CSV has client columns only.
    """
    cmd = [
        str(pa.binary),
        "-m",
        model,
        "-u",
        url,
        "-i",
        opts.protocol,
        *(["--service-kind", opts.service_kind] if opts.service_kind != "triton" else []),
        "-b",
        str(opts.batch_size),
        *opts.load_args(),
        "--measurement-mode",
        "time_windows",
        "--measurement-interval",
        str(opts.measurement_interval_ms),
        "--stability-percentage",
        str(opts.stability_percentage),
        "--max-trials",
        str(opts.max_trials),
        "--input-data",
        str(input_data),
        "-f",
        str(csv_path),
        "--verbose-csv",  # adds server-side queue / compute input / infer / output columns
        "-v",  # per-window numbers in the log, so an unstable run shows why
    ]
    for name, dims in opts.shapes.items():
        cmd += ["--shape", f"{name}:{','.join(map(str, dims))}"]
    return cmd


def run(pa: PerfAnalyzer, cmd: list[str], concurrency: int, csv_path: Path, timeout_s: float = 600.0, required: tuple[str, ...] | None = None) -> PerfRun:
    """Run one perf_analyzer command; never raises for an unstable measurement (it is marked invalid).

    ``required``: the CSV columns the run must have (default :data:`REQUIRED`; :data:`CLIENT_REQUIRED` for a server
    that reports no server-side split, as TorchServe).
    """
    required = REQUIRED if required is None else required
    csv_path.unlink(missing_ok=True)
    out: list[str] = []
    err: list[str] = []
    summary = threading.Event()
    # preexec: a SIGKILLed stage must not leave perf_analyzer running.
    with subprocess.Popen(cmd, env=pa.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=set_pdeathsig) as proc:  # noqa: PLW1509
        readers = [threading.Thread(target=_collect, args=(s, buf, ev), daemon=True) for s, buf, ev in ((proc.stdout, out, summary), (proc.stderr, err, None))]
        for t in readers:
            t.start()
        try:
            rc, note = _wait(proc, summary, csv_path, required, timeout_s)
        except BaseException:  # Ctrl-C too: killed at once, as subprocess.run did (perf_analyzer would finish its windows)
            proc.kill()
            raise
        for t in readers:
            t.join(timeout=5)
    log = note + "".join(out) + "".join(err)
    text = csv_path.read_text() if csv_path.exists() else ""
    rows = parse_csv(text, required) if text else []
    return PerfRun(concurrency, cmd, rc, text, log, rows[0] if rows and rc == 0 else {})


_SUMMARY = "Inferences/Second vs. Client"  # heads the results table perf_analyzer prints once it has measured
_AFTER_RESULTS_S = 1.0


def _collect(stream: IO[str] | None, buf: list[str], summary: threading.Event | None) -> None:
    for line in stream or ():
        buf.append(line)
        if summary is not None and _SUMMARY in line:
            summary.set()


def _results_written(csv_path: Path, required: tuple[str, ...]) -> bool:
    try:
        text = csv_path.read_text()
        return text.endswith("\n") and bool(parse_csv(text, required))
    except (OSError, ToolError):
        return False


def _wait(proc: subprocess.Popen[str], summary: threading.Event, csv_path: Path, required: tuple[str, ...], timeout_s: float) -> tuple[int, str]:
    """perf_analyzer's exit code, or 0 once its results are out and it lingers, or -1 past ``timeout_s``; and a note.

    Past a server's capacity in request-rate mode, perf_analyzer writes its results and then waits for every request
    the server still has queued, spinning its worker threads (seen: 12 s after 1.4 s of measuring, 7 CPU-seconds in
    5 s on 2 cores, starving the server it waits on). Its measurement is complete by then: it is stopped.
    """
    deadline = time.monotonic() + timeout_s
    written_at: float | None = None
    while True:
        try:
            return proc.wait(timeout=0.05), ""
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if written_at is None and summary.is_set() and _results_written(csv_path, required):
            written_at = now
        if written_at is not None and now - written_at > _AFTER_RESULTS_S:
            proc.kill()
            proc.wait()
            return 0, f"[pipeline] stopped {now - written_at:.1f} s after writing its results: it was waiting on requests the server still had queued\n"
        if now > deadline:
            proc.kill()
            proc.wait()
            return -1, f"timed out after {timeout_s:.0f} s\n"


# CSV column -> our key; times in the CSV are microseconds, we store milliseconds.
_COLUMNS = {
    "Concurrency": ("concurrency", 1.0),
    "Request Rate": ("request_rate", 1.0),  # request-rate and request-intervals modes: the first column
    "Inferences/Second": ("throughput_infer_s", 1.0),
    "Client Send": ("client_send_ms", _US),
    "Network+Server Send/Recv": ("network_ms", _US),
    "Server Queue": ("server_queue_ms", _US),
    "Server Compute Input": ("server_compute_input_ms", _US),
    "Server Compute Infer": ("server_compute_infer_ms", _US),
    "Server Compute Output": ("server_compute_output_ms", _US),
    "Client Recv": ("client_recv_ms", _US),
    "p50 latency": ("p50_ms", _US),
    "p90 latency": ("p90_ms", _US),
    "p95 latency": ("p95_ms", _US),
    "p99 latency": ("p99_ms", _US),
    "Avg latency": ("avg_ms", _US),
    "request/response": ("request_response_ms", _US),
    "response wait": ("response_wait_ms", _US),
}
REQUIRED = ("Inferences/Second", "p50 latency", "p99 latency", "Server Queue", "Server Compute Infer")
CLIENT_REQUIRED = ("Inferences/Second", "p50 latency", "p99 latency")  # service kinds without Triton's server split


_PASS = re.compile(r"Pass \[(\d+)\] throughput: ([0-9.eE+-]+) infer/sec\. Avg latency: (\d+) usec")


def parse_passes(log: str) -> list[tuple[float, float]]:
    """Every measurement window of a ``-v`` log, in order: (infer/s, average latency ms). A queue that grows shows as
    latency rising window after window."""
    return [(float(m.group(2)), int(m.group(3)) * _US) for m in _PASS.finditer(log)]


def parse_csv(text: str, required: tuple[str, ...] = REQUIRED) -> list[dict[str, float]]:
    """Rows of perf_analyzer's ``-f`` CSV, keyed by our names, found by column *name*.

    Raises:
        ToolError: a column we rely on is absent (e.g. the run lacked --verbose-csv).
    """
    # The CSV may be followed by a blank line and server-metrics sections: keep the first table.
    table = text.strip().split("\n\n")[0]
    reader = csv.DictReader(io.StringIO(table))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in required if c not in header] + ([] if {"Concurrency", "Request Rate"} & set(header) else ["Concurrency"])
    if missing:
        raise ToolError(
            f"perf_analyzer CSV lacks columns {missing}",
            fix="run perf_analyzer with -f <csv> --verbose-csv (build_command does)",
            details={"columns": header},
        )
    rows = []
    for raw in reader:
        raw = {(k or "").strip(): v for k, v in raw.items()}
        row: dict[str, float] = {}
        for col, (key, scale) in _COLUMNS.items():
            if raw.get(col) not in (None, ""):
                row[key] = float(raw[col]) * scale
        server = sum(row.get(k, 0.0) for k in ("server_queue_ms", "server_compute_input_ms", "server_compute_infer_ms", "server_compute_output_ms"))
        if "server_queue_ms" in row:  # Triton's split (TorchServe's CSV has none)
            row["server_ms"] = server
            row["queue_share"] = row["server_queue_ms"] / server if server > 0 else 0.0
        rows.append(row)
    return rows
