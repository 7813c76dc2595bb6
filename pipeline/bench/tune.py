"""Tune the throughput variant by measurement, like Model Analyzer but into the named variant.

Each candidate (max queue delay x preferred batch sizes x instance count) is served and
measured at ``bench.tune.concurrency``, between two timings of in-process ONNX Runtime at
the baseline's best batch size (the gauge). Candidates are measured minutes apart on a
machine whose speed drifts by tens of percent, so raw infer/s would rank the machine's
moods: the rank is infer/s over the gauge of the same minute, and a candidate counts
only when its two gauges agree within ``bench.tune.max_drift`` (it is measured again,
up to ``bench.tune.max_rounds`` times, until they do). The best counted candidate whose p99
fits ``bench.tune.latency_budget_ms`` wins. The result is a full ``throughput.pbtxt`` written
as a bench output, plus the Hydra overrides that make the repository stage emit it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.bench.measure.results import Candidate, Point, Round, Scheduling, Tuning
from pipeline.bench.measure.servers import EmbeddedMode, Target
from pipeline.bench.measure.sweep import Sweeper
from pipeline.core.config import BenchConfig


def candidates(bench: BenchConfig, max_batch_size: int) -> list[Scheduling]:
    """Every scheduling combination to try; preferred sizes above max_batch_size are dropped."""
    out = []
    for delay, pref, inst in itertools.product(bench.tune.queue_delays_us, bench.tune.preferred_batch_sizes, bench.tune.instance_counts):
        pref = [b for b in pref if 0 < b <= max_batch_size]
        if pref:
            out.append(Scheduling(int(delay), pref, int(inst)))
    return out


def bracketed_rounds(
    step: Callable[[int], Point], ratio: Callable[[Point, float], float | None], gauge: Callable[[], float], max_rounds: int, max_drift: float
) -> list[Round[Point]]:
    """Rounds of [gauge, step, gauge] until one counts (its gauges agree within ``max_drift`` and it gave a ratio) or
    ``max_rounds`` ran. A candidate is ranked on one counted round: unlike the headline rounds, it is no estimate
    over many, so a drifted round is measured again instead of widening an interval.
    """
    rounds: list[Round[Point]] = []
    while len(rounds) < max_rounds and not any(r.counted for r in rounds):
        i = len(rounds)
        before = gauge()
        done = step(i)
        gauges = [before, gauge()]
        drift = (max(gauges) - min(gauges)) / min(gauges)
        r = ratio(done, sum(gauges) / 2)
        rounds.append(Round(i, gauges, drift, r, r is not None and drift <= max_drift, [done]))
    return rounds


def apply(cfg: mc.ModelConfig, s: Scheduling) -> mc.ModelConfig:
    """A copy of ``cfg`` with the candidate's scheduling values (the shipped config with the winner's is what gets written)."""
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    out.dynamic_batching.ClearField("preferred_batch_size")
    out.dynamic_batching.preferred_batch_size.extend(s.preferred_batch_sizes)
    out.dynamic_batching.max_queue_delay_microseconds = s.max_queue_delay_us
    if not out.instance_group:
        out.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
    out.instance_group[0].count = s.instance_count
    return out


def _candidate(s: Scheduling, rounds: list[Round[Point]], budget_ms: float) -> Candidate:
    """A candidate as its last round measured it (the counted one, when one counted: rounds stop there)."""
    last = rounds[-1]
    p = last.steps[0]
    c = Candidate(
        s,
        p.valid,
        p.reason,
        p.avg_batch,
        len(rounds),
        [round(g, 1) for g in last.gauges],
        last.drift,
        last.counted,
        last.ratio,
        within_budget=bool(p.valid and p.metrics["p99_ms"] <= budget_ms),
    )
    if p.valid:
        c.p99_ms, c.p50_ms, c.throughput_infer_s = (p.metrics[k] for k in ("p99_ms", "p50_ms", "throughput_infer_s"))
    return c


def tune(mode: EmbeddedMode, sweeper: Sweeper, bench: BenchConfig, gauge: Callable[[], float]) -> Tuning:
    """Serve and measure every candidate; return them all and the winner (see :func:`choose`).

    ``gauge()`` is in-process ONNX Runtime infer/s at the baseline's best batch size.
    """
    base = mode.embedded_config("throughput")
    plain = dataclasses.replace(sweeper, probe_row=None)  # the rank needs infer/s only, not the stand-in's split
    measured = []
    for k, cand in enumerate(candidates(bench, base.max_batch_size)):
        name = f"tune{k}"
        mode.add_variant(name, apply(base, cand))
        with mode.serve(name) as t:

            def step(i: int, t: Target = t, name: str = name) -> Point:
                return plain.run(t, [bench.tune.concurrency], f"{name}_r{i}")[0]

            def ratio(done: Point, gauge_mean: float) -> float | None:
                return done.metrics["throughput_infer_s"] / gauge_mean if done.valid else None

            rounds = bracketed_rounds(step, ratio, gauge, bench.tune.max_rounds, bench.tune.max_drift)
        measured.append(_candidate(cand, rounds, bench.tune.latency_budget_ms))
    record = Tuning(bench.tune.concurrency, bench.tune.latency_budget_ms, bench.tune.max_drift, measured, None, "")
    won = choose(measured)
    if won is None:
        record.persist = (
            "no candidate met the p99 budget with steady gauges: raise bench.tune.latency_budget_ms, widen the "
            "bench.tune.* lists, or on a drifting machine raise bench.tune.max_rounds / bench.tune.max_drift"
        )
        return record
    record.chosen = s = measured[won].scheduling
    # How far ahead of the runner-up: a lead of a few percent is inside what one measurement per candidate can tell.
    shares = [measured[i].vs_ort_best for i in ranked(measured)[:2]]
    record.lead_over_next = shares[0] / shares[1] - 1 if len(shares) == 2 and shares[0] and shares[1] else None
    record.persist = (
        f"dvc exp run -S 'variants.throughput.dynamic_batching.max_queue_delay_us={s.max_queue_delay_us}' "
        f"-S 'variants.throughput.dynamic_batching.preferred_batch_sizes={s.preferred_batch_sizes}' "
        f"-S 'variants.throughput.instance_count={s.instance_count}'"
    )
    return record


def ranked(rows: list[Candidate]) -> list[int]:
    """Indices of the candidates that may win (within the p99 budget, steady gauges), best share of in-process first."""
    ok = [i for i, r in enumerate(rows) if r.within_budget and r.steady]
    return sorted(ok, key=lambda i: rows[i].vs_ort_best or 0.0, reverse=True)


def choose(rows: list[Candidate]) -> int | None:
    """Index of the winner, or None when no candidate may win."""
    order = ranked(rows)
    return order[0] if order else None
