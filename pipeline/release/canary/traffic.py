"""Canary traffic: requests to the live version and to the candidate, each timed, and the rounds they make.

The two sides are fresh copies loaded for the canary beside the served model: the candidate, and a
baseline of the live version (its release's bytes, the pointer's config). Comparing the candidate with
the served model itself would compare a model serving production traffic with one serving only the
canary's: their queues differ, and so do their latencies, whatever the candidate is like (measured on
MiniLM with a 10% share: candidate/live p99 0.36x for identical bytes). A baseline of the same size as
the canary, under the same traffic, is how Kayenta and Flagger judge canaries too.

Two kinds of traffic (``release.canary.traffic``, ``--traffic``):

- ``replay``: every sample row goes to both sides, one request at a time, which side first
  alternating row by row, for ``duration_s``; every answer is kept for the output comparison.
- ``real``: a perf_analyzer load standing in for production traffic: ``request_rate`` requests per
  second, ``share`` of them to the candidate, as many to the baseline, the rest to the served model
  unversioned (as production clients send them). One perf_analyzer process per part, all at once,
  each writing every request's timestamps (``--profile-export-file``).

Latency is compared as the bench compares it (:mod:`pipeline.stats.estimate`): the time both versions
were served side by side is cut into ``rounds`` equal slices; within a slice both saw the same machine,
so its candidate/live p99 ratio is drift-free on its own, and the headline is the median over slices
with its 90% bootstrap interval. A slice with fewer than ``min_round_requests`` answers on either side
gives no ratio (counted as left out), never a p99 of a handful of requests.

Triton's own per-version numbers come from two places: the statistics API (success and failure
counts, the errors the verdict reads) and ``/metrics`` (request, queue and compute time per version).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from pipeline.records.canary import LatencySummary, MetricsDelta, MetricsRow, Round, SideLatency
from pipeline.stats.estimate import Estimate, estimate
from pipeline.serving.client import TritonClient, infer_inputs, metrics_text
from pipeline.serving.perf_analyzer import PerfAnalyzer, write_input_data
from pipeline.serving.process import set_pdeathsig

Feed = dict[str, np.ndarray]
LIVE, CANDIDATE, PRODUCTION = "live", "candidate", "production"


@dataclass(frozen=True)
class Endpoint:
    """One side of the canary: a model name on the server and the version it serves (``pinned`` False: sent unversioned)."""

    side: str
    model: str
    version: int
    pinned: bool = True

    @property
    def label(self) -> str:
        return f"{self.model} v{self.version}"


@dataclass
class Sent:
    """One request: which side, when it was sent (epoch s), its latency in ms (None: it failed).

    ``timed`` False: a warm-up request (the first pass over the rows), counted for errors, not for latency.
    """

    side: str
    start_s: float
    ms: float | None
    timed: bool = True


@dataclass
class Latency:
    """The paired comparison: per-round numbers, and the candidate/live p99 and p50 ratios over rounds."""

    rounds: list[Round]
    p99_ratio: Estimate
    p50_ratio: Estimate
    live: SideLatency
    candidate: SideLatency
    window_s: float
    min_round_requests: int

    def summary(self) -> LatencySummary:
        """What the canary's record keeps of it."""
        return LatencySummary(self.p99_ratio.to_json(), self.p50_ratio.to_json(), self.live, self.candidate, round(self.window_s, 3), self.min_round_requests, list(self.rounds))


@dataclass
class OutputPairs:
    """Both versions' answers to the same rows, for the output comparison.

    A deterministic server answers a row the same way every time, so a pair already seen (same row,
    same bytes on both sides) adds nothing and is counted, not stored again.
    """

    names: list[str]
    live: list[dict[str, np.ndarray]] = field(default_factory=list)
    candidate: list[dict[str, np.ndarray]] = field(default_factory=list)
    answered: int = 0  # rows answered by both versions
    _seen: set[str] = field(default_factory=set)

    def add(self, row: int, live: dict[str, np.ndarray], cand: dict[str, np.ndarray]) -> None:
        self.answered += 1
        h = hashlib.sha256(str(row).encode())
        for out in (live, cand):
            for n in self.names:
                h.update(np.ascontiguousarray(out[n]).tobytes())
        key = h.hexdigest()
        if key not in self._seen:
            self._seen.add(key)
            self.live.append(live)
            self.candidate.append(cand)


def replay(url: str, live: Endpoint, cand: Endpoint, rows: list[Feed], pairs: OutputPairs, seconds: float) -> tuple[list[Sent], list[str]]:
    """Send every row to both versions, in turn: one warm-up pass, then for ``seconds``; keep the answers.

    Returns every request and the distinct error messages (at most 5).
    """
    client = TritonClient(url)
    prepared = [infer_inputs(r) for r in rows]
    sent: list[Sent] = []
    errors: list[str] = []
    t_end = 0.0
    i = 0
    try:
        while True:
            if i == len(rows):  # the warm-up pass is done: the timed traffic starts now
                t_end = time.perf_counter() + seconds
            if i >= len(rows) and time.perf_counter() >= t_end:
                break
            k = i % len(rows)
            answers = {}
            for ep in (live, cand) if i % 2 == 0 else (cand, live):  # which goes first alternates: neither always pays for the other
                start, t0 = time.time(), time.perf_counter()
                try:
                    r = client.raw.infer(ep.model, prepared[k], model_version=str(ep.version))
                    answers[ep.side] = {n: r.as_numpy(n) for n in pairs.names}
                    sent.append(Sent(ep.side, start, (time.perf_counter() - t0) * 1e3, i >= len(rows)))
                except Exception as e:  # noqa: BLE001 - any failed request is an error of that version, counted and shown, never fatal
                    sent.append(Sent(ep.side, start, None, i >= len(rows)))
                    msg = f"{ep.label}: {str(e).strip()[:300] or type(e).__name__}"
                    if msg not in errors and len(errors) < 5:
                        errors.append(msg)
            if len(answers) == 2:
                pairs.add(k, answers[LIVE], answers[CANDIDATE])
            i += 1
    finally:
        client.close()
    return sent, errors


@dataclass(frozen=True)
class Load:
    """A real load: ``rate`` requests per second for ``seconds``, ``share`` of them to each copy, the rest to production."""

    rate: float
    share: float
    seconds: float


def share_load(pa: PerfAnalyzer, url: str, sides: list[Endpoint], rows: list[Feed], batched: bool, load: Load, workdir: Path) -> tuple[list[Sent], list[str]]:
    """``load`` from perf_analyzer: ``share`` of it to the baseline, ``share`` to the candidate, the rest to production.

    ``sides`` are the baseline, the candidate and (optionally) the served model. Returns every request the
    processes exported and a note per process that did not exit cleanly.
    """
    data = write_input_data(workdir / "inputs.json", rows, batched)
    one_shape = len({tuple((k, v.shape) for k, v in sorted(r.items())) for r in rows}) == 1
    shapes = [f"{k}:{','.join(map(str, v.shape[1:] if batched else v.shape))}" for k, v in rows[0].items()] if one_shape else []
    procs: dict[str, tuple[subprocess.Popen[bytes], IO[str], Path]] = {}
    for ep in sides:
        r = load.rate * (load.share if ep.side != PRODUCTION else 1 - 2 * load.share)
        if r <= 0:
            continue
        export = workdir / f"{ep.side}.profile.json"
        cmd = [
            str(pa.binary),
            "-m",
            ep.model,
            *(["-x", str(ep.version)] if ep.pinned else []),
            "-u",
            url,
            "-i",
            "http",
            "--input-data",
            str(data),
            "--request-rate-range",
            f"{r:g}",
            "--request-count",
            str(max(1, round(r * load.seconds))),
            "--profile-export-file",
            str(export),
            "-f",
            str(workdir / f"{ep.side}.csv"),
        ]
        for s in shapes:
            cmd += ["--shape", s]
        log = open(workdir / f"{ep.side}.log", "w+")  # noqa: SIM115 - closed below, after the process ends
        # preexec: perf_analyzer dies with us, so a killed canary leaves no load behind.
        procs[ep.side] = (subprocess.Popen(cmd, env=pa.env(), stdout=log, stderr=subprocess.STDOUT, preexec_fn=set_pdeathsig), log, export)  # noqa: PLW1509
    return _collect(procs, load.seconds)


def _collect(procs: dict[str, tuple[subprocess.Popen[bytes], IO[str], Path]], seconds: float) -> tuple[list[Sent], list[str]]:
    """Wait for each perf_analyzer process, read every request it exported; a note per process that did not exit cleanly."""
    sent: list[Sent] = []
    notes: list[str] = []
    try:
        for side, (proc, log, export) in procs.items():
            try:
                # Production's part is background: once both copies are done, it gets a moment to finish, then it stops,
                # so a rate the served model cannot keep up with does not stretch the canary (Triton counts its answers).
                rc = proc.wait(timeout=seconds + 120 if side != PRODUCTION else 2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait() if side != PRODUCTION else 0
                if side == PRODUCTION:
                    notes.append("the production part of the load was stopped 2 s after the copies' parts: the served model fell behind its rate")
            log.seek(0)
            if rc != 0:
                tail = " | ".join(ln.strip() for ln in log.read().splitlines() if ln.strip())[-400:]
                notes.append(f"perf_analyzer for the {side} version exited {rc}: {tail}")
            sent += _exported(side, export)
    finally:
        for proc, log, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    return sent, notes


def _exported(side: str, path: Path) -> list[Sent]:
    """Requests in a perf_analyzer profile export (timestamps in ns); one without a response failed."""
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    out = []
    for exp in data.get("experiments", []):
        for r in exp.get("requests", []):
            resp = r.get("response_timestamps") or []
            out.append(Sent(side, r["timestamp"] / 1e9, (resp[-1] - r["timestamp"]) / 1e6 if resp else None))
    return out


def _pct(ms: list[float], q: float) -> float | None:
    return float(np.percentile(ms, q)) if ms else None


def _side(sent: list[Sent]) -> SideLatency:
    ok = [s.ms for s in sent if s.ms is not None]
    return SideLatency(len(sent), len(sent) - len(ok), _pct(ok, 50), _pct(ok, 99))


def paired_rounds(sent: list[Sent], rounds: int, min_requests: int) -> Latency:
    """Cut the time both sides were served into ``rounds`` slices and compare the sides within each."""
    by = {side: [s for s in sent if s.side == side and s.timed] for side in (LIVE, CANDIDATE)}
    spans = [(min(s.start_s for s in xs), max(s.start_s for s in xs)) for xs in by.values() if xs]
    lo, hi = (max(a for a, _ in spans), min(b for _, b in spans)) if len(spans) == 2 else (0.0, 0.0)
    width = (hi - lo) / rounds if hi > lo else 0.0
    out: list[Round] = []
    for k in range(rounds if width else 0):
        a, b = lo + k * width, lo + (k + 1) * width
        inside = {side: [s.ms for s in xs if s.ms is not None and a <= s.start_s < b + (1e-9 if k == rounds - 1 else 0)] for side, xs in by.items()}
        r = Round(a, len(inside[LIVE]), len(inside[CANDIDATE]))
        if min(r.live_n, r.candidate_n) >= min_requests:
            r.live_p50_ms, r.live_p99_ms = _pct(inside[LIVE], 50), _pct(inside[LIVE], 99)
            r.candidate_p50_ms, r.candidate_p99_ms = _pct(inside[CANDIDATE], 50), _pct(inside[CANDIDATE], 99)
        out.append(r)
    return Latency(
        out,
        estimate([r.ratio("p99") for r in out]),
        estimate([r.ratio("p50") for r in out]),
        _side(by[LIVE]),
        _side(by[CANDIDATE]),
        max(hi - lo, 0.0),
        min_requests,
    )


# ---------------------------------------------------------------- Triton's own per-version numbers
def version_counts(client: TritonClient, ep: Endpoint) -> dict[str, int]:
    """Success and failure counts of one version from Triton's statistics API (zeros when it has none yet)."""
    for st in client.model_statistics(ep.model).get("model_stats", []):
        if str(st.get("version")) == str(ep.version):
            inf = st.get("inference_stats", {})
            return {k: int((inf.get(k) or {}).get("count", 0) or 0) for k in ("success", "fail")}
    return {"success": 0, "fail": 0}


# Triton's per-model, per-version families on /metrics (counters; durations are cumulative microseconds).
METRIC_FAMILIES = {
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "failure",
    "nv_inference_count": "inferences",
    "nv_inference_exec_count": "executions",
    "nv_inference_request_duration_us": "request_us",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_us",
}


def version_metrics(metrics_url: str, endpoints: list[Endpoint]) -> dict[str, dict[str, float]] | None:
    """Each endpoint's counters from Triton's /metrics, keyed by side (None: the endpoint is unreachable)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = metrics_text(metrics_url)
    if text is None:
        return None
    out: dict[str, dict[str, float]] = {ep.side: {} for ep in endpoints}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            key = METRIC_FAMILIES.get(sample.name.removesuffix("_total"))
            if key is None:
                continue
            for ep in endpoints:
                if sample.labels.get("model") == ep.model and sample.labels.get("version") == str(ep.version):
                    out[ep.side][key] = out[ep.side].get(key, 0.0) + sample.value
    return out


def metrics_delta(before: dict[str, dict[str, float]] | None, after: dict[str, dict[str, float]] | None) -> MetricsDelta:
    """What each side's counters did during the canary, with mean request/queue/compute ms per request."""
    if before is None or after is None:
        return MetricsDelta(False)
    sides = {}
    for side, now in after.items():
        d = {k: now.get(k, 0.0) - before.get(side, {}).get(k, 0.0) for k in METRIC_FAMILIES.values()}
        n = d["success"] + d["failure"]
        ms = {k: round(d[k] / n / 1e3, 4) if n else None for k in ("request_us", "queue_us", "compute_infer_us")}
        sides[side] = MetricsRow(int(d["success"]), int(d["failure"]), int(d["inferences"]), int(d["executions"]), ms["request_us"], ms["queue_us"], ms["compute_infer_us"])
    return MetricsDelta(True, sides)
