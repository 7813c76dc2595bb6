"""The text endpoint measured as users call it: sentences in, perf_analyzer against ``<model>_text`` in a real Triton.

The repository as shipped is served (the tensor model through the embedded ONNX Runtime stand-in, the text model
through the python backend), one server per variant. The headline is paired, like the bench's other ratios: in each
round the text endpoint's c=1 p50 (perf_analyzer, the real sentences) and, right after, in process, the same work a
client would do without Triton (tokenize one sentence, run ONNX Runtime with the latency variant's settings), the
order alternating; the ratio's median over rounds with its 90% bootstrap interval. Each round also runs the tensor
endpoint at c=1 in the same server, so text and tensors are compared in the same paired rounds. From Triton's own
statistics over the text runs: the share of the endpoint's server time spent outside the tensor model (tokenizing,
Python, the BLS call). Then throughput at bench.text.concurrency on both variants, and the response cache on a
repeated-query workload (pipeline/bench/text_cache.py). Every run but the cache's own is of the text model with its
response cache off, whatever the variant ships: a cached answer would time a lookup, not the endpoint's work.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.bench import text_cache, text_instances
from pipeline.core.atomic import write_text
from pipeline.core.config import BenchConfig, PipelineConfig
from pipeline.core.host import cores_available
from pipeline.core.tokenizer import load_tokenizer
from pipeline.repository.text_endpoint import shipped_files
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.embedded import read_config
from pipeline.serving.process import EmbeddedServer
from pipeline.stats.estimate import Estimate, estimate
from pipeline.stats.ort import OrtSettings, ort_session

Json = dict[str, Any]
SUFFIX = "_text"


@dataclass
class TextRound:
    """One paired round: the text endpoint's and the tensor endpoint's c=1 p50, in-process tokenize + ORT p50."""

    text_p50_ms: float | None
    tensor_p50_ms: float | None
    in_process_p50_ms: float
    order: str  # "served first" | "in-process first"
    python_share: float | None = None  # of the text endpoint's server time in this round's text run: outside the tensor model

    @property
    def ratio(self) -> float | None:
        return self.text_p50_ms / self.in_process_p50_ms if self.text_p50_ms else None


@dataclass
class TextEndpointResult:
    """What the bench measured of ``<model>_text``."""

    model: str
    rounds: list[TextRound]
    vs_in_process: Estimate  # text c=1 p50 / in-process (tokenize + ONNX Runtime) p50
    vs_tensor: Estimate  # text c=1 p50 / tensor endpoint c=1 p50, same server, same rounds
    python_share: float | None  # of the text endpoint's server time at c=1: outside the tensor model
    instances: dict[str, int]  # variant -> the text model's instance count
    throughput: dict[str, dict[int, Json]] = field(default_factory=dict)  # variant -> c -> {infer/s, p50, p99} or {error}
    cache: text_cache.CacheResult | None = None  # the response cache on a repeated-query workload (None: not measured)
    instance_choice: text_instances.InstanceChoice | None = None  # the throughput variant's count against the other
    # sha256 of the text model's files as shipped (not the bench's altered copy): "model.py", "tokenizer.json" (of the
    # version directory), "config.pbtxt", "configs/<variant>.pbtxt". A release of the endpoint carries this section's
    # summary only when its own files are these (pipeline/release/evidence/reports.py).
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            "model": self.model,
            "text_c1_p50_vs_in_process": self.vs_in_process.to_json(),
            "text_c1_p50_vs_tensor_c1_p50": self.vs_tensor.to_json(),
            "python_share_of_server_time": self.python_share,
            "instances": self.instances,
            "rounds": [
                {"text_p50_ms": r.text_p50_ms, "tensor_p50_ms": r.tensor_p50_ms, "in_process_p50_ms": r.in_process_p50_ms, "order": r.order, "python_share": r.python_share}
                for r in self.rounds
            ],
            "throughput": {v: {f"c{c}": m for c, m in pts.items()} for v, pts in self.throughput.items()},
            "cache": self.cache.to_json() if self.cache else None,
            "instance_choice": self.instance_choice.to_json() if self.instance_choice else None,
            "files": self.files,
        }

    @classmethod
    def from_json(cls, d: Json) -> TextEndpointResult:
        rounds = [TextRound(r["text_p50_ms"], r["tensor_p50_ms"], r["in_process_p50_ms"], r["order"], r.get("python_share")) for r in d.get("rounds", [])]
        tput = {v: {int(c[1:]): m for c, m in pts.items()} for v, pts in d.get("throughput", {}).items()}
        return cls(
            d["model"],
            rounds,
            Estimate.from_json(d["text_c1_p50_vs_in_process"]),
            Estimate.from_json(d["text_c1_p50_vs_tensor_c1_p50"]),
            d.get("python_share_of_server_time"),
            d.get("instances", {}),
            tput,
            text_cache.CacheResult.from_json(d["cache"]) if d.get("cache") else None,
            text_instances.InstanceChoice.from_json(d["instance_choice"]) if d.get("instance_choice") else None,
            d.get("files", {}),
        )

    def summary(self) -> Json:
        """Flat headline numbers for dvc metrics."""
        out: Json = {k: v for k, v in self.vs_in_process.flat("text_c1_p50_vs_in_process").items() if not k.endswith("_rounds")}
        out["text_python_share"] = self.python_share
        for v, pts in self.throughput.items():
            for c, m in pts.items():
                out[f"text_{v}_c{c}_infer_s"] = m.get("throughput_infer_s")
        return out | (self.cache.summary() if self.cache else {}) | (self.instance_choice.summary() if self.instance_choice else {})


def sentences_input(path: Path, sentences: list[str]) -> Path:
    """perf_analyzer ``--input-data``: one sentence per request (the batch axis is perf_analyzer's ``-b``)."""
    write_text(path, json.dumps({"data": [{"text": {"content": [s], "shape": [1]}} for s in sentences]}))
    return path


def _server_ms(srv: EmbeddedServer, model: str) -> tuple[int, float]:
    """(successful requests, their summed server time in ms: queue + compute) of ``model`` so far."""
    with contextlib.closing(srv.client()) as c:
        inf = c.inference_stats(model)
    ns = sum(int(inf.get(k, {}).get("ns", 0)) for k in ("queue", "compute_input", "compute_infer", "compute_output"))
    return int(inf.get("success", {}).get("count", 0)), ns / 1e6


def _instance_count(srv: EmbeddedServer, model: str) -> int:
    with contextlib.closing(srv.client()) as c:
        got = c.model_config(model)
    return sum(g.count for g in got.instance_group) if got is not None else 0


def _tokenizer(cfg: PipelineConfig, path: Path) -> Any:  # noqa: ANN401 - tokenizers.Tokenizer
    """The shipped tokenizer file ``path`` as the endpoint configures it (one sentence: no padding)."""
    assert cfg.model.tokenizer is not None
    return load_tokenizer(path, cfg.model.tokenizer)


def tensor_input(cfg: PipelineConfig, tok: Any, sentences: list[str], path: Path) -> Path:  # noqa: ANN401 - tokenizers.Tokenizer
    """The tensor endpoint's perf_analyzer input: the same sentences, tokenized by ``tok`` (:func:`_tokenizer`), one per step."""
    tok_cfg = cfg.model.tokenizer
    assert tok_cfg is not None
    steps = []
    for s in sentences:
        e = tok.encode(s)
        steps.append({n: {"content": list(getattr(e, str(f))), "shape": [len(e.ids)]} for n, f in tok_cfg.inputs.items()})
    write_text(path, json.dumps({"data": steps}))
    return path


def _opts(b: BenchConfig, concurrency: int) -> pa_mod.PerfOptions:
    return pa_mod.PerfOptions(
        concurrency=concurrency,
        measurement_interval_ms=b.rounds.measurement_interval_ms,
        stability_percentage=b.rounds.stability_percentage,
        max_trials=b.max_trials,
    )


@dataclass(frozen=True)
class _Perf:
    """perf_analyzer runs against one server, with the rounds' windows; CSVs and logs in ``work``."""

    b: BenchConfig
    pa: pa_mod.PerfAnalyzer
    srv: EmbeddedServer
    work: Path

    def run(self, model: str, data: Path, concurrency: int, tag: str) -> pa_mod.PerfRun:
        csv = self.work / f"{tag}.csv"
        opts = _opts(self.b, concurrency)
        cmd = pa_mod.build_command(self.pa, model, self.srv.http_url, data, csv, opts)
        run = pa_mod.run(self.pa, cmd, concurrency, csv, opts.deadline_s(self.b.perf_timeout_s))
        write_text(self.work / "logs" / f"{tag}.log", run.log)
        return run


def _round(perf: _Perf, models: tuple[str, str], data: tuple[Path, Path], timed: Callable[[list[str]], list[float]], sentences: list[str], i: int) -> TextRound:
    """Round ``i``: served (text, then tensor) and in-process, the order alternating between rounds."""
    text, tensor = models
    b, srv = perf.b, perf.srv

    share: float | None = None

    def served() -> tuple[float | None, float | None]:
        nonlocal share
        before = _server_ms(srv, text), _server_ms(srv, tensor)
        t = perf.run(text, data[0], 1, f"text_c1_round{i}")
        after = _server_ms(srv, text), _server_ms(srv, tensor)
        share = _share(before, after)
        n = perf.run(tensor, data[1], 1, f"tensor_c1_round{i}")
        return t.row.get("p50_ms") if t.valid else None, n.row.get("p50_ms") if n.valid else None

    def local() -> float:
        runs = max(len(sentences), b.baseline.runs)
        return float(np.median(timed([sentences[k % len(sentences)] for k in range(runs)])))

    if i % 2 == 0:
        (t, n), ip = served(), local()
    else:
        ip = local()
        t, n = served()
    return TextRound(t, n, ip, "served first" if i % 2 == 0 else "in-process first", share)


def _share(before: tuple[tuple[int, float], tuple[int, float]], after: tuple[tuple[int, float], tuple[int, float]]) -> float | None:
    """Of the text endpoint's server time per request, the share outside the tensor model (whose requests are the BLS
    calls: one per text execution at c=1), from the two models' statistics around one run."""
    (tn0, tms0), (nn0, nms0) = before
    (tn1, tms1), (nn1, nms1) = after
    if tn1 <= tn0 or nn1 <= nn0 or tms1 <= tms0:
        return None
    per_text, per_tensor = (tms1 - tms0) / (tn1 - tn0), (nms1 - nms0) / (nn1 - nn0)
    return max(0.0, 1.0 - per_tensor / per_text)


def _point(perf: _Perf, model: str, data: Path, c: int, variant: str) -> Json:
    run = perf.run(model, data, c, f"text_{variant}_c{c}")
    if not run.valid:
        return {"error": run.reason()}
    return {k: run.row.get(k) for k in ("throughput_infer_s", "p50_ms", "p99_ms", "server_queue_ms", "server_compute_infer_ms")}


def _in_process(cfg: PipelineConfig, tok: Any, onnx: Path, settings: OrtSettings) -> Callable[[list[str]], list[float]]:  # noqa: ANN401 - tokenizers.Tokenizer
    """A timer of what a client does without Triton: tokenize one sentence (as the endpoint does), run ORT on it."""
    tok_cfg = cfg.model.tokenizer
    assert tok_cfg is not None
    sess = ort_session(onnx, settings)
    feeds = {name: str(f) for name, f in tok_cfg.inputs.items()}

    def timed(batch: list[str]) -> list[float]:
        out = []
        for s in batch:
            t = time.perf_counter()
            e = tok.encode(s)
            sess.run(None, {name: np.array([getattr(e, f)], dtype=np.int64) for name, f in feeds.items()})
            out.append((time.perf_counter() - t) * 1000)
        return out

    return timed


def _cache(cfg: PipelineConfig, perf: _Perf, models: tuple[str, str], sentences: list[str], served: Path, work: Path, log: Callable[[str], object]) -> text_cache.CacheResult:
    """The response cache's rounds and check in the throughput variant's server (pipeline/bench/text_cache.py)."""
    c = cfg.bench.text.cache
    workload = text_cache.zipf_workload(sentences, c.requests, c.zipf_s, cfg.model.seed)
    path = sentences_input(work / "cache_input.json", workload)
    log(f"[bench] response cache: {c.requests} texts (Zipf s={c.zipf_s}, {len(set(workload))} distinct) at c={c.concurrency}, {c.rounds} rounds off/on")
    outputs = [o.name for o in read_config(served / models[0] / "config.pbtxt").output]
    return text_cache.measure(perf.run, perf.srv, models, (path, workload), c, outputs)


def measure(
    cfg: PipelineConfig, repository: Path, onnx: Path, settings: OrtSettings, sentences: list[str], pa: pa_mod.PerfAnalyzer, work: Path, log: Callable[[str], object]
) -> TextEndpointResult:
    """Measure ``repository/<model>_text`` (see the module docstring); ``onnx``/``settings``: the latency variant's file
    and ORT settings, for the in-process side."""
    b, name = cfg.bench, cfg.model.name
    text = name + SUFFIX
    (work / "logs").mkdir(parents=True, exist_ok=True)
    files = shipped_files(repository / text, cfg.repository.version)
    # Served from a copy: the python backend's stub writes __pycache__ beside model.py, never into a DVC output.
    served = work / "repository"
    for m in (name, text):
        shutil.copytree(repository / m, served / m, ignore=shutil.ignore_patterns("__pycache__"))
    repository = served
    twin = text_cache.add_twin(served, text) if b.text.cache.enabled else None
    shipped = read_config(served / text / "configs" / "throughput.pbtxt").instance_group[0].count
    other = text_instances.other_count(shipped, cores_available()) if b.text.instances.enabled else None
    other_twin = text_instances.add_twin(served, text, other) if other is not None else None
    tokenizer = repository / text / str(cfg.repository.version) / "tokenizer.json"  # what ships, not what the config names
    tok = _tokenizer(cfg, tokenizer)  # loaded once: the tensor endpoint's inputs and the in-process side tokenize alike
    data = (sentences_input(work / "text_input.json", sentences), tensor_input(cfg, tok, sentences, work / "tensor_input.json"))
    timed = _in_process(cfg, tok, onnx, settings)
    timed(sentences[:5])  # warm: the first runs allocate
    log(f"[bench] text endpoint {text}: {len(sentences)} real sentences, {b.text.rounds} paired rounds at c=1 against tokenize + ONNX Runtime in process")
    rounds: list[TextRound] = []
    instances: dict[str, int] = {}
    throughput: dict[str, dict[int, Json]] = {}
    cache: text_cache.CacheResult | None = None
    choice: text_instances.InstanceChoice | None = None
    for variant in ("latency", "throughput"):
        # The cached twin and the other instance count are measured beside the throughput variant.
        here = twin if variant == "throughput" else None
        twins = tuple(t for t in (here, other_twin) if t is not None) if variant == "throughput" else ()
        with EmbeddedServer(
            repository,
            name,
            variant,
            timeout_s=b.server_timeout_s,
            also_load=(text, *twins),
            ort_standin=True,
            log_dir=work / "logs",
        ).with_cache(b.text.cache.size_mb * 2**20 if here else 0) as srv:
            instances[variant] = _instance_count(srv, text)
            perf = _Perf(b, pa, srv, work)
            if variant == "latency":
                rounds = [_round(perf, (text, name), data, timed, sentences, i) for i in range(b.text.rounds)]
            throughput[variant] = {c: _point(perf, text, data[0], c, variant) for c in b.text.concurrency}
            if variant == "throughput" and other_twin is not None and other is not None:
                c = max(b.text.concurrency)
                log(f"[bench] text model instances: {shipped} (shipped) against {other}, at c={c}, {b.text.instances.rounds} paired rounds (the first opened by the run above)")
                first = throughput[variant][c].get("throughput_infer_s")  # the shipped model at c, just measured
                choice = text_instances.measure(perf.run, (text, other_twin), data[0], c, (shipped, other), b.text.instances, first)
            if here:
                cache = _cache(cfg, perf, (text, here), sentences, repository, work, log)
    shares = [r.python_share for r in rounds if r.python_share is not None]
    return TextEndpointResult(
        text,
        rounds,
        estimate([r.ratio for r in rounds]),
        estimate([r.text_p50_ms / r.tensor_p50_ms if r.text_p50_ms and r.tensor_p50_ms else None for r in rounds]),
        float(np.median(shares)) if shares else None,
        instances,
        throughput,
        cache,
        choice,
        files,
    )
