"""The headline numbers: served against in-process ORT, throughput variant against latency variant.

The rounds (rounds/pairing.py) give them wherever they ran, as estimates with intervals: the sweep measures
one point after another, each variant in its own server, minutes apart on a machine whose speed
drifts. The unpaired numbers are kept beside them to show what pairing corrects.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.stats.estimate import Estimate
from pipeline.bench.measure.results import Point
from pipeline.bench.results import BenchResult, Comparison, Ratios
from pipeline.core.config import BenchConfig, BenchProfile, BenchServer


def compared_concurrencies(b: BenchConfig) -> list[int]:
    """Where the throughput variant is compared with the latency variant (c=1 is the batching tax, not a comparison).

    The rounds' concurrencies (bench.rounds.throughput.concurrency) when throughput rounds run
    (embedded server, bench.rounds.throughput.min > 0), else the swept ones (bench.sweep.concurrency).
    """
    embedded = b.server == BenchServer.embedded
    if embedded and b.profile == BenchProfile.default and b.rounds.throughput.min == 0:
        return []  # the default profile measures the variants only in rounds: no rounds, no comparison
    paired = embedded and b.rounds.throughput.min > 0
    for source in [b.rounds.throughput.concurrency] * paired + [b.sweep.concurrency]:
        cs = sorted({int(c) for c in source if int(c) > 1})
        if cs:
            return cs
    return []


@dataclass
class Headline:
    """The served c=1 point behind the headline ratio, and in-process ORT p50 at that point's machine speed.

    ``paired``: the round with the median ratio; its in-process p50 is the server's ORT time in that window over the
    round's in-server/in-process factor (embedded), or the mean of the gauges around it (external). ``unpaired``:
    the sweep's c=1 point against the faster start/end baseline (no c=1 rounds ran). ``none``: no round gave a ratio.
    """

    served: Point | None
    ort_p50_ms: float | None
    method: str


def headline_c1(res: BenchResult) -> Headline:
    """See :class:`Headline`."""
    paired = res.paired_c1
    if not paired:
        return Headline(res.point("latency", 1), res.baseline.latency.p50_ms, "unpaired")
    r = paired.median_round()
    if r is None:
        return Headline(None, None, "none")
    in_server, factor = r.in_server_ms(paired.in_server_key), r.in_server_vs_in_process()
    return Headline(r.latency, in_server / factor if in_server and factor else r.ort_p50_ms(), "paired")


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
    pair = res.paired_throughput.get(c)
    if not pair:
        return Comparison(c, Estimate(unpaired), unpaired, Estimate(unpaired_best), unpaired_best)
    # Rounds (both variants in one server, next to each other) when they ran: no value if none gave one.
    return Comparison(c, pair.vs_latency(), unpaired, pair.vs_ort_best(), unpaired_best)


def ratios(res: BenchResult) -> Ratios:
    """The headline numbers of ``res``, at the concurrencies its settings compare (:func:`compared_concurrencies`)."""
    lat1, thr1 = res.point("latency", 1), res.point("throughput", 1)
    b_lat = res.baseline.latency.p50_ms
    pc, h = res.paired_c1, headline_c1(res)
    if pc:
        head, served_p50, ort_p50 = pc.ratio(), pc.served_p50_ms(), pc.ort_p50_ms()
    else:
        served_p50, ort_p50 = (h.served.metrics["p50_ms"] if h.served else None), h.ort_p50_ms
        head = Estimate(served_p50 / ort_p50 if served_p50 and ort_p50 else None)
    # Embedded only: the python backend's own cost, measured by the stand-in (Triton compute infer minus the
    # mean time inside ORT), taken off the median round's served p50. Triton's onnxruntime backend has some cost
    # of its own there too, so this is a lower bound for it, never the headline.
    # The cost is a mean and the p50 a median: a stall in the window raises the first, not the second. A cost at or
    # above the p50 says the means took stalls, so nothing is taken off (a negative ratio would be no estimate).
    cost = standin_cost_ms(h.served)
    p50 = h.served.metrics["p50_ms"] if h.served else None
    removed = head.value * (p50 - cost) / p50 if head.value and p50 and cost is not None and cost < p50 else None
    # The batching tax, two ways: the queue wait Triton measured on the throughput variant at c=1 (direct), and
    # its p50 above the latency variant's (from the c=1 rounds when they ran both variants).
    unpaired_tax = thr1.metrics["p50_ms"] - lat1.metrics["p50_ms"] if thr1 and lat1 else None
    tax = pc.batching_tax_ms() if pc and any(r.throughput is not None for r in pc.rounds) else Estimate(unpaired_tax)
    return Ratios(
        latency_c1_p50_ms=served_p50,
        ort_p50_ms=ort_p50,
        latency_c1=head,
        latency_c1_p50_vs_ort_p50_standin_removed=removed,
        # The c=1 point (the sweep's, or the median round's) against the start/end baseline: what pairing corrects.
        latency_c1_p50_vs_ort_p50_unpaired=lat1.metrics["p50_ms"] / b_lat if lat1 and b_lat else None,
        latency_c1_queue_share=lat1.metrics["queue_share"] if lat1 else None,
        compared=[_comparison(res, c) for c in compared_concurrencies(res.settings)],
        throughput_c1_queue_ms=thr1.metrics["server_queue_ms"] if thr1 else None,
        throughput_c1_queue_share=thr1.metrics["queue_share"] if thr1 else None,
        batching_tax_c1=tax,
        batching_tax_c1_ms_unpaired=unpaired_tax,
        served_vs_in_server=pc.served_vs_in_server() if pc and pc.in_server_key else Estimate(None),
        in_server_vs_in_process=pc.in_server_vs_in_process() if pc and pc.in_server_key else Estimate(None),
        serving_overhead_ms=pc.overhead_ms() if pc and pc.in_server_key else Estimate(None),
    )
