"""Triton's response cache on the text endpoint, measured on a repeated-query workload.

In the throughput variant's server (started with a local cache of ``bench.text.cache.size_mb``) the text model is
served twice: as shipped with its response cache off, and as a twin (``<model>_text_cached``) with it on, the configs
otherwise the same. perf_analyzer sends both the same workload, ``bench.text.cache.requests`` texts drawn from the
sample sentences with a Zipf law (rank = order in the file; perf_analyzer cycles through them), at
``bench.text.cache.concurrency``, in paired rounds whose order alternates. Per round: p50 and infer/s of each side,
and the twin's hit ratio over its run from Triton's own counters (cache_hit / (cache_hit + cache_miss)). Then the
workload's first ``bench.text.cache.checked`` distinct texts, each made new to the cache, are asked of the uncached model and twice of the twin: the
answers must be the same bytes. (The workload's own texts were cached from whatever batch they rode in, padded to its
longest row: those differ from an answer alone by batching's rounding, reported as ``batched_max_abs``.)
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.config.schema_bench import TextCacheBenchConfig
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.embedded import read_config, write_config
from pipeline.serving.process import EmbeddedServer
from pipeline.stats.estimate import Estimate, estimate

Json = dict[str, Any]
TWIN = "_cached"
# perf_analyzer against one model: (model, --input-data file, concurrency, tag for its CSV and log) -> the run
Runner = Callable[[str, Path, int, str], pa_mod.PerfRun]


@dataclass(frozen=True)
class CacheRound:
    """One paired round: the same workload without and with the cache, in ``order``."""

    off_p50_ms: float | None
    on_p50_ms: float | None
    off_infer_s: float | None
    on_infer_s: float | None
    hit_ratio: float | None  # of the cached run's requests, answered from the cache
    order: str  # "off first" | "on first"
    error: str | None = None  # why a side has no numbers (perf_analyzer's reason), when one has none

    @property
    def p50_speedup(self) -> float | None:
        return self.off_p50_ms / self.on_p50_ms if self.off_p50_ms and self.on_p50_ms else None

    @property
    def throughput_ratio(self) -> float | None:
        return self.on_infer_s / self.off_infer_s if self.off_infer_s and self.on_infer_s else None


@dataclass(frozen=True)
class CacheResult:
    """The response cache on a repeated-query workload (see the module docstring)."""

    model: str  # the cached twin
    size_mb: int
    zipf_s: float
    requests: int  # texts in the workload
    distinct: int  # of which distinct
    concurrency: int
    rounds: list[CacheRound]
    p50_speedup: Estimate  # p50 without the cache / p50 with it
    throughput_ratio: Estimate  # infer/s with the cache / without it
    hit_ratio: float | None  # the mean of the rounds' hit ratios
    identical: bool | None  # a text new to the cache: uncached, first (miss) and cached (hit) answers the same bytes
    checked: int  # such texts: the workload's first bench.text.cache.checked distinct ones
    check_hits: int  # cache hits while checking: one per checked text, plus the workload's own texts asked again
    # The workload's texts as cached during the rounds (computed in whatever batch they rode in, padded to its longest
    # row) against each asked alone without the cache: the largest absolute difference. Batching's, not the cache's.
    batched_max_abs: float | None

    def to_json(self) -> Json:
        return {
            "model": self.model,
            "size_mb": self.size_mb,
            "zipf_s": self.zipf_s,
            "requests": self.requests,
            "distinct": self.distinct,
            "concurrency": self.concurrency,
            "p50_speedup": self.p50_speedup.to_json(),
            "throughput_ratio": self.throughput_ratio.to_json(),
            "hit_ratio": self.hit_ratio,
            "identical": self.identical,
            "checked": self.checked,
            "check_hits": self.check_hits,
            "batched_max_abs": self.batched_max_abs,
            "rounds": [
                {
                    "off_p50_ms": r.off_p50_ms,
                    "on_p50_ms": r.on_p50_ms,
                    "off_infer_s": r.off_infer_s,
                    "on_infer_s": r.on_infer_s,
                    "hit_ratio": r.hit_ratio,
                    "order": r.order,
                    "error": r.error,
                }
                for r in self.rounds
            ],
        }

    @classmethod
    def from_json(cls, d: Json) -> CacheResult:
        rounds = [CacheRound(r["off_p50_ms"], r["on_p50_ms"], r["off_infer_s"], r["on_infer_s"], r["hit_ratio"], r["order"], r.get("error")) for r in d["rounds"]]
        return cls(
            d["model"],
            d["size_mb"],
            d["zipf_s"],
            d["requests"],
            d["distinct"],
            d["concurrency"],
            rounds,
            Estimate.from_json(d["p50_speedup"]),
            Estimate.from_json(d["throughput_ratio"]),
            d["hit_ratio"],
            d["identical"],
            d["checked"],
            d["check_hits"],
            d["batched_max_abs"],
        )

    def summary(self) -> Json:
        """Flat headline numbers for dvc metrics."""
        out: Json = {k: v for k, v in self.p50_speedup.flat("text_cache_p50_speedup").items() if not k.endswith("_rounds")}
        out |= {k: v for k, v in self.throughput_ratio.flat("text_cache_throughput_ratio").items() if not k.endswith("_rounds")}
        out["text_cache_hit_ratio"] = self.hit_ratio
        out["text_cache_identical"] = self.identical
        return out


def zipf_workload(sentences: list[str], n: int, s: float, seed: int) -> list[str]:
    """``n`` texts drawn from ``sentences`` with P(rank k) proportional to k^-s (rank 1 = the first sentence)."""
    ranks = np.arange(1, len(sentences) + 1, dtype=np.float64)
    p = ranks**-s
    picks = np.random.default_rng(seed).choice(len(sentences), size=n, p=p / p.sum())
    return [sentences[i] for i in picks]


def add_twin(served: Path, text: str) -> str:
    """In the served copy ``served``: the text model's response cache off in every config, and a twin of it with the
    cache on (the same configs otherwise). Returns the twin's name."""
    twin = text + TWIN
    shutil.copytree(served / text, served / twin)
    for model, on in ((text, False), (twin, True)):
        for pb in [served / model / "config.pbtxt", *sorted((served / model / "configs").glob("*.pbtxt"))]:
            cfg = read_config(pb)
            cfg.name = model
            cfg.response_cache.enable = on
            write_config(pb, cfg, f"# the bench's copy of {text}, response cache {'on' if on else 'off'}\n")
    return twin


def _counts(srv: EmbeddedServer, model: str) -> tuple[int, int]:
    """(cache hits, cache misses) of ``model`` so far, from Triton's statistics."""
    with contextlib.closing(srv.client()) as c:
        inf = c.inference_stats(model)
    return int(inf.get("cache_hit", {}).get("count", 0)), int(inf.get("cache_miss", {}).get("count", 0))


def _ratio(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    hits, misses = after[0] - before[0], after[1] - before[1]
    return hits / (hits + misses) if hits + misses > 0 else None


def _ask(client: Any, model: str, s: str, outputs: list[str]) -> list[np.ndarray]:  # noqa: ANN401 - tritonclient.http client
    import tritonclient.http as th  # lazy: the bench's other paths never send text themselves

    x = th.InferInput("text", [1, 1], "BYTES")
    x.set_data_from_numpy(np.array([[s.encode("utf-8")]], dtype=object))
    got = client.infer(model, [x], outputs=[th.InferRequestedOutput(o) for o in outputs])
    return [got.as_numpy(o) for o in outputs]


@dataclass(frozen=True)
class _Check:
    identical: bool | None
    checked: int
    hits: int
    batched_max_abs: float | None


def _check(srv: EmbeddedServer, models: tuple[str, str], texts: list[str], outputs: list[str]) -> _Check:
    """Texts the cache has not seen (each of ``texts`` with a suffix), one request at a time: the uncached model's
    answer, the twin's (a miss) and the twin's again (a hit) must be the same bytes. Then ``texts`` themselves, cached
    during the rounds from whatever batch they rode in: their largest difference from the uncached answer alone."""
    text, twin = models
    before = _counts(srv, twin)
    same: list[bool] = []
    worst: list[float] = []
    with contextlib.closing(srv.client()) as c:
        for i, s in enumerate(texts):
            fresh = f"{s} (cache check {i})"
            plain = [a.tobytes() for a in _ask(c.raw, text, fresh, outputs)]
            miss = [a.tobytes() for a in _ask(c.raw, twin, fresh, outputs)]
            hit = [a.tobytes() for a in _ask(c.raw, twin, fresh, outputs)]
            same.append(plain == miss == hit)
            alone, cached = _ask(c.raw, text, s, outputs), _ask(c.raw, twin, s, outputs)
            worst += [float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) for a, b in zip(alone, cached, strict=True) if a.size]
    hits = _counts(srv, twin)[0] - before[0]
    return _Check(all(same) if same else None, len(same), hits, max(worst) if worst else None)


def measure(run: Runner, srv: EmbeddedServer, models: tuple[str, str], data: tuple[Path, list[str]], c: TextCacheBenchConfig, outputs: list[str]) -> CacheResult:
    """The rounds and the check (module docstring). ``models``: (the uncached text model, its cached twin); ``data``:
    the workload's --input-data file and its texts."""
    text, twin = models
    path, workload = data
    rounds: list[CacheRound] = []
    for i in range(c.rounds):
        got: dict[str, tuple[pa_mod.PerfRun, float | None]] = {}
        for model in (text, twin) if i % 2 == 0 else (twin, text):
            before = _counts(srv, twin)
            r = run(model, path, c.concurrency, f"text_cache_{'on' if model == twin else 'off'}_round{i}")
            got[model] = (r, _ratio(before, _counts(srv, twin)))
        (off, _), (on, hits) = got[text], got[twin]
        rounds.append(
            CacheRound(
                off.row.get("p50_ms") if off.valid else None,
                on.row.get("p50_ms") if on.valid else None,
                off.row.get("throughput_infer_s") if off.valid else None,
                on.row.get("throughput_infer_s") if on.valid else None,
                hits,
                "off first" if i % 2 == 0 else "on first",
                next((f"cache {side}: {r.reason()}" for side, r in (("off", off), ("on", on)) if not r.valid), None),
            )
        )
    ratios = [r.hit_ratio for r in rounds if r.hit_ratio is not None]
    distinct = list(dict.fromkeys(workload))  # in order of first appearance: the frequent texts first
    check = _check(srv, models, distinct[: c.checked], outputs)
    return CacheResult(
        twin,
        c.size_mb,
        c.zipf_s,
        len(workload),
        len(distinct),
        c.concurrency,
        rounds,
        estimate([r.p50_speedup for r in rounds]),
        estimate([r.throughput_ratio for r in rounds]),
        float(np.mean(ratios)) if ratios else None,
        check.identical,
        check.checked,
        check.hits,
        check.batched_max_abs,
    )
