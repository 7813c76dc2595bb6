"""The throughput variant's text-endpoint instance count, judged by measurement.

Each instance of the text model tokenizes a dynamic batch and calls the tensor model. One instance per ONNX Runtime
instance is the shipped default; whether another count serves more depends on the tokenizer's share of the work and
on the cores. So the bench serves a copy of the text model with the other count (1 beside 2, 2 beside 1; never more
instances than cores) beside the shipped one, in the throughput variant's server, and runs both at the highest of
``bench.text.concurrency`` in paired rounds, the order alternating. The ratio other/shipped infer/s, with its 90%
interval, says whether to keep the shipped count or to set ``variants.throughput.text_instances``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.config.schema_bench import TextInstancesBenchConfig
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.embedded import read_config, write_config
from pipeline.stats.estimate import Estimate, estimate

TWIN = "__instances"
Run = Callable[[str, Path, int, str], pa_mod.PerfRun]  # (model, input data, concurrency, tag) -> a perf_analyzer run


@dataclass
class InstanceChoice:
    """The shipped text-model instance count of the throughput variant against the other one, paired."""

    shipped: int
    other: int
    concurrency: int
    rounds: list[tuple[float | None, float | None]]  # per round: (shipped, other) infer/s
    ratio: Estimate  # other / shipped infer/s
    min_gain: float = 0.05  # what the other count must gain (the interval's low end) to be chosen

    @property
    def verdict(self) -> str:
        """Which count to serve, and why."""
        r = self.ratio
        if r.value is None:
            return f"kept {self.shipped}: the comparison gave no number"
        if r.has_interval and r.low is not None and r.low > 1 + self.min_gain:
            return f"{self.other} instances serve more: set variants.throughput.text_instances={self.other}"
        if r.has_interval and r.high is not None and r.high < 1:
            return f"kept {self.shipped}: {self.other} instances serve less"
        if r.has_interval and r.low is not None and r.low > 1:
            return f"kept {self.shipped}: {self.other} instances serve more, but by less than the {self.min_gain:.0%} a change must gain"
        return f"kept {self.shipped}: the interval cannot tell {self.other} instances from {self.shipped}"

    def to_json(self) -> dict[str, Any]:
        return {
            "shipped": self.shipped,
            "other": self.other,
            "concurrency": self.concurrency,
            "rounds": [{"shipped_infer_s": s, "other_infer_s": o} for s, o in self.rounds],
            "other_vs_shipped_infer_s": self.ratio.to_json(),
            "min_gain": self.min_gain,
            "verdict": self.verdict,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> InstanceChoice:
        rounds = [(r.get("shipped_infer_s"), r.get("other_infer_s")) for r in d.get("rounds", [])]
        return cls(int(d["shipped"]), int(d["other"]), int(d["concurrency"]), rounds, Estimate.from_json(d["other_vs_shipped_infer_s"]), float(d.get("min_gain", 0.05)))

    def summary(self) -> dict[str, Any]:
        """Flat numbers for dvc metrics."""
        out: dict[str, Any] = {k: v for k, v in self.ratio.flat("text_instances_other_vs_shipped").items() if not k.endswith("_rounds")}
        return out | {"text_instances_shipped": self.shipped, "text_instances_other": self.other}


def other_count(shipped: int, cores: int) -> int | None:
    """The count to measure beside ``shipped``: one more while the cores allow, else one fewer (None: there is none)."""
    other = shipped + 1 if shipped + 1 <= cores else shipped - 1
    return other if other >= 1 and other != shipped else None


def add_twin(served: Path, text: str, count: int) -> str:
    """In the served copy ``served``: a copy of the text model with ``count`` instances in every config (its response
    cache off, as the measured text model's). Returns its name."""
    twin = text + TWIN
    shutil.copytree(served / text, served / twin)
    for pb in [served / twin / "config.pbtxt", *sorted((served / twin / "configs").glob("*.pbtxt"))]:
        cfg = read_config(pb)
        cfg.name = twin
        cfg.response_cache.enable = False
        cfg.instance_group[0].count = count
        write_config(pb, cfg, f"# the bench's copy of {text} with {count} instance(s)\n")
    return twin


def measure(run: Run, models: tuple[str, str], data: Path, concurrency: int, counts: tuple[int, int], cfg: TextInstancesBenchConfig, first: float | None) -> InstanceChoice:
    """``cfg.rounds`` paired rounds of the shipped text model and its twin (``models``; ``counts``: their instance
    counts) at ``concurrency``, the order alternating. ``first``: the shipped model's infer/s from the run just before
    at this concurrency (the throughput point), which opens round 0 instead of a run of its own."""
    pairs: list[tuple[float | None, float | None]] = []
    for i in range(cfg.rounds):
        got: dict[int, float | None] = {0: first} if i == 0 and first is not None else {}
        for k in [k for k in ((0, 1) if i % 2 == 0 else (1, 0)) if k not in got]:
            r = run(models[k], data, concurrency, f"text_instances{counts[k]}_round{i}")
            got[k] = r.row.get("throughput_infer_s") if r.valid else None
        pairs.append((got[0], got[1]))
    ratio = estimate([o / s if s and o else None for s, o in pairs])
    return InstanceChoice(counts[0], counts[1], concurrency, pairs, ratio, cfg.min_gain)
