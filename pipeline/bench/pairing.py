"""Paired rounds: served measurements bracketed by in-process ONNX Runtime timings (the gauge).

This machine's speed drifts by tens of percent within a minute (a shared VM; it flips between a
fast and a slow state every few seconds), so two numbers taken apart can make a ratio say
anything. A round counts only when the gauges around its served runs agree; the headline ratios
are medians over the rounds that count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from pipeline.bench.measured import Bracketed, PairedC1, PairedThroughput, Point, Round, VariantRun

S = TypeVar("S")


def bracketed_rounds(
    steps: Callable[[int], list[Callable[[], S]]],
    ratio: Callable[[list[S], float], float | None],
    gauge: Callable[[], float],
    gauge_key: str,
    want: int,
    max_rounds: int,
    max_drift: float,
    inside: Callable[[list[S]], float | None] | None = None,
) -> Bracketed[S]:
    """Rounds of [gauge, step, gauge, step, ..., gauge]; the median ratio over the rounds that count.

    Each of a round's ``steps(round)`` (served measurements) sits between two gauges; a round
    counts only if all its gauges agree within ``max_drift`` (the machine kept its speed for
    every step) and ``ratio(step results, mean gauge)`` gave a number. Rounds run until
    ``want`` count or ``max_rounds`` ran. Which rounds count, and when to stop, depend only on
    the gauges and on validity, never on the ratio's value.

    The gauges around a step miss a flip that begins and ends inside it. ``inside(step
    results)``, where given, is the same ORT work timed by the server *during* the steps (the
    embedded stand-in's time inside ONNX Runtime): it must agree with the gauges too.
    """
    rounds: list[Round[S]] = []
    for i in range(max_rounds):
        if sum(r.counted for r in rounds) >= want:
            break
        gauges, done = [gauge()], []
        for step in steps(i):
            done.append(step())
            gauges.append(gauge())
        mean = float(np.mean(gauges))
        in_server = inside(done) if inside else None
        checked = gauges + ([in_server] if in_server else [])
        drift = (max(checked) - min(checked)) / min(checked)
        r = ratio(done, mean)
        rounds.append(Round(i, gauges, mean, in_server, drift, r, r is not None and drift <= max_drift, done))
    out = Bracketed(gauge_key, max_drift, rounds)
    counted = out.counted
    if counted:
        ratios = [r.ratio for r in counted if r.ratio is not None]
        out.ratio = float(np.median(ratios))
        out.gauge_median = float(np.median([r.gauge_mean for r in counted]))
        out.ratio_range = [min(ratios), max(ratios)]
    else:
        out.reason = (
            f"no round kept the in-process gauge ({gauge_key}){' and the in-server ORT time' if inside else ''} within {max_drift:.0%} (drifts "
            + ", ".join(f"{r.drift:.0%}" for r in rounds) + ") or a served run was invalid"
        )
    return out


def paired_c1(
    serve_c1: Callable[[int], Point],
    ort_p50: Callable[[], float],
    want: int,
    max_rounds: int,
    max_drift: float,
    in_server_key: str | None = None,
) -> PairedC1:
    """Served c=1 p50 against the in-process batch-1 ORT p50 measured right before and right after it.

    ``in_server_key``: the served metric that is the server's own time inside ORT per request
    (embedded mode: ``server_compute_infer_ms`` for the native stand-in, ``standin_ort_ms`` for
    the python one); a round then also needs it to agree with the gauges (see bracketed_rounds).
    """

    def steps(i: int) -> list[Callable[[], Point]]:
        return [lambda: serve_c1(i)]

    def ratio(done: list[Point], ort_ms: float) -> float | None:
        return done[0].metrics["p50_ms"] / ort_ms if done[0].valid else None

    def inside(done: list[Point]) -> float | None:
        return done[0].metrics.get(in_server_key) if in_server_key and done[0].valid else None

    # Without an in-server gauge (external Triton) there is none to check, and no reason may name one.
    b = bracketed_rounds(steps, ratio, ort_p50, "ort_p50_ms", want, max_rounds, max_drift, inside if in_server_key else None)
    served = float(np.median([r.steps[0].metrics["p50_ms"] for r in b.counted])) if b.ratio is not None else None
    return PairedC1(**b.head(), in_server_key=in_server_key, served_p50_ms=served)


def paired_throughput(
    serve: Callable[[str, int, int], Point],
    ort_best: Callable[[], float],
    concurrency: list[int],
    want: int,
    max_rounds: int,
    max_drift: float,
) -> dict[int, PairedThroughput]:
    """Throughput variant over latency variant at each concurrency, both measured inside one bracketed round.

    ``serve(variant, concurrency, round)`` runs perf_analyzer on one variant of a server that
    holds both. A round is [gauge, one variant, gauge, the other, gauge]: a speed flip during
    either run shows in its gauges. The order alternates between rounds, so what is left of
    the machine's drift favours neither variant. The gauge is in-process ORT inferences/s at
    the baseline's best batch size, so each round also gives the throughput variant against
    in-process best-batch throughput of that minute.
    """
    out: dict[int, PairedThroughput] = {}
    for c in concurrency:

        def steps(i: int, c: int = c) -> list[Callable[[], VariantRun]]:
            order = ["latency", "throughput"] if i % 2 == 0 else ["throughput", "latency"]
            return [lambda v=v: VariantRun(v, serve(v, c, i)) for v in order]

        def ratio(done: list[VariantRun], _ort: float) -> float | None:
            p = {s.variant: s.point for s in done}
            lat, thr = p["latency"], p["throughput"]
            return thr.metrics["throughput_infer_s"] / lat.metrics["throughput_infer_s"] if lat.valid and thr.valid else None

        s = PairedThroughput(**bracketed_rounds(steps, ratio, ort_best, "ort_best_infer_s", want, max_rounds, max_drift).head(), concurrency=c)
        counted = s.counted
        if counted:
            s.latency_infer_s, s.throughput_infer_s = (float(np.median([s.run(r, v).metrics["throughput_infer_s"] for r in counted]))
                                                       for v in ("latency", "throughput"))  # fmt: skip
            # What the throughput variant's scheduling costs a request, e.g. the batching tax at c=1.
            s.throughput_vs_ort_best = float(np.median([s.round_vs_ort_best(r) for r in counted]))
            s.p50_delta_ms = float(np.median([s.round_p50_delta_ms(r) for r in counted]))
        out[c] = s
    return out
