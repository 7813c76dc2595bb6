"""The headline numbers: served against in-process ORT, throughput variant against latency variant.

Paired rounds (pairing.py) outrank the sweep's points wherever they ran: the sweep measures
one point after another, each variant in its own server, minutes apart on a machine whose
speed drifts. The unpaired numbers are kept beside them to show what pairing corrects.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.bench.measured import PairedThroughput, Point
from pipeline.bench.results import BenchResult, Comparison, Ratios
from pipeline.core.config import BenchConfig, BenchServer


def compared_concurrencies(b: BenchConfig) -> list[int]:
    """Where the throughput variant is compared with the latency variant (c=1 is the batching tax, not a comparison).

    The paired concurrencies (bench.paired_throughput_concurrency) when paired throughput rounds run
    (embedded server, bench.paired_throughput_rounds > 0), else the swept ones (bench.concurrency).
    """
    paired = b.server == BenchServer.embedded and b.paired_throughput_rounds > 0
    for source in [b.paired_throughput_concurrency] * paired + [b.concurrency]:
        cs = sorted({int(c) for c in source if int(c) > 1})
        if cs:
            return cs
    return []


@dataclass
class Headline:
    """The served c=1 point and in-process ORT p50 behind the headline ratio, and how they were paired.

    ``paired``: the counted round with the median ratio (see pairing.paired_c1); ``unpaired``:
    the sweep's c=1 point against the start/end baseline (when bench.paired_rounds=0);
    ``drifted``: paired rounds ran but none counted, so there is no headline number.
    """

    served: Point | None
    ort_p50_ms: float | None
    method: str


def headline_c1(res: BenchResult) -> Headline:
    """See :class:`Headline`."""
    paired = res.paired_c1
    if paired:
        counted = sorted(paired.counted, key=lambda r: r.ratio or 0.0)
        if not counted:
            return Headline(None, None, "drifted")
        mid = counted[(len(counted) - 1) // 2]
        return Headline(mid.steps[0], mid.gauge_mean, "paired")
    return Headline(res.point("latency", 1), res.baseline.latency.p50_ms, "unpaired")


def paired_throughput(res: BenchResult, c: int) -> PairedThroughput | None:
    """The paired throughput/latency rounds at concurrency ``c`` (see pairing.paired_throughput), if they ran."""
    return res.paired_throughput.get(c)


def standin_cost_ms(served: Point | None) -> float | None:
    """Triton compute infer minus the stand-in's mean time inside ORT: the python backend's cost per request."""
    if not served or "standin_ort_ms" not in served.metrics:
        return None
    return served.metrics["server_compute_infer_ms"] - served.metrics["standin_ort_ms"]


def _comparison(res: BenchResult, c: int) -> Comparison:
    lat, thr = res.point("latency", c), res.point("throughput", c)
    unpaired = thr.metrics["throughput_infer_s"] / lat.metrics["throughput_infer_s"] if lat and thr else None
    best = res.baseline.throughput.best_infer_s
    unpaired_best = thr.metrics["throughput_infer_s"] / best if thr and best else None
    pair = paired_throughput(res, c)
    if not pair:
        return Comparison(c, unpaired, unpaired, unpaired_best, unpaired_best)
    # Paired (both variants in one server, same bracketed round) when it ran; None if it ran and nothing counted.
    return Comparison(c, pair.ratio, unpaired, pair.throughput_vs_ort_best, unpaired_best, len(pair.counted))


def ratios(res: BenchResult) -> Ratios:
    """The headline numbers of ``res``, at the concurrencies its settings compare (:func:`compared_concurrencies`)."""
    lat1 = res.point("latency", 1)
    b_lat = res.baseline.latency.p50_ms
    paired = res.paired_c1
    h = headline_c1(res)
    served, ort_p50 = h.served, h.ort_p50_ms
    counted = paired if paired and paired.ratio else None  # medians over counted rounds, when there are any
    if paired:
        vs_ort, rounds_counted = paired.ratio, len(paired.counted)
    else:
        vs_ort, rounds_counted = (served.metrics["p50_ms"] / ort_p50 if served and ort_p50 else None), None
    # Embedded only: the python backend's own cost, measured by the stand-in (Triton compute infer minus the
    # mean time inside ORT), taken off the served p50. Triton's onnxruntime backend has some cost of its own
    # there too, so this is a lower bound for it, never the headline.
    cost = standin_cost_ms(served)
    removed = (served.metrics["p50_ms"] - cost) / ort_p50 if served and ort_p50 and cost is not None and vs_ort else None
    thr1 = res.point("throughput", 1)
    # The batching tax, two ways: the queue wait Triton measured on the throughput variant at c=1 (direct), and
    # its p50 above the latency variant's (paired when c=1 is in bench.paired_throughput_concurrency).
    unpaired_tax = thr1.metrics["p50_ms"] - lat1.metrics["p50_ms"] if thr1 and lat1 else None
    pair1 = paired_throughput(res, 1)
    return Ratios(
        latency_c1_p50_ms=counted.served_p50_ms if counted else (served.metrics.get("p50_ms") if served else None),
        ort_p50_ms=counted.gauge_median if counted else ort_p50,
        latency_c1_p50_vs_ort_p50=vs_ort,
        latency_c1_paired_rounds_counted=rounds_counted,
        latency_c1_p50_vs_ort_p50_standin_removed=removed,
        # The sweep's c=1 point against the start/end baseline: kept to show what pairing corrects.
        latency_c1_p50_vs_ort_p50_unpaired=lat1.metrics["p50_ms"] / b_lat if lat1 and b_lat else None,
        latency_c1_queue_share=lat1.metrics["queue_share"] if lat1 else None,
        compared=[_comparison(res, c) for c in compared_concurrencies(res.settings)],
        throughput_c1_queue_ms=thr1.metrics["server_queue_ms"] if thr1 else None,
        throughput_c1_queue_share=thr1.metrics["queue_share"] if thr1 else None,
        batching_tax_c1_ms=pair1.p50_delta_ms if pair1 else unpaired_tax,
        batching_tax_c1_ms_unpaired=unpaired_tax,
    )
