"""The headline rounds in the result: ratios with intervals, the machine_drift rule, report, summary and console line.

Rounds are recorded through rounds/pairing.py's own groups with fake measurements (no server), then read as bench.json,
report.md and the metrics summary have them.
"""

from __future__ import annotations

import pytest

from pipeline.bench.report import render
from pipeline.bench.analysis.diagnose import diagnose
from pipeline.stats.estimate import StopRule
from pipeline.bench.measure.results import Point
from pipeline.bench.rounds.pairing import alternations, c1_embedded, c1_external, run_rounds, throughput_at
from pipeline.bench.progress import Progress
from pipeline.bench.analysis.ratios import ratios
from pipeline.bench.results import BenchResult
from pipeline.bench.rounds.results import C1Rounds, ThroughputRounds, sweep_from_rounds
from pipeline.core.config import BenchConfig, RoundsConfig, ThroughputRoundsConfig
from tests.bench.test_bench_report import _configs, _pt, _res

KEY = "server_compute_infer_ms"


def c1_rounds(served: list[tuple[float, float] | None], bursts: list[list[tuple[float, float]]], tax: list[float] | None = None) -> C1Rounds:
    """Embedded c=1 rounds: per round (served p50, the server's ORT time in that window) or None (invalid), the
    alternations' (server ms, in-process ms), and optionally the throughput variant's p50 above the latency one's."""

    def serve(variant: str, i: int) -> Point:
        if served[i] is None:
            return Point(1, False, "exit 2: Failed to obtain stable measurement")
        p50, ort = served[i]  # type: ignore[misc]
        return _pt(1, p50 + (tax[i] if tax and variant == "throughput" else 0.0), 200, 0.03, ort)

    def alternate(i: int) -> list:
        server, process = iter(s for s, _ in bursts[i]), iter(p for _, p in bursts[i])
        return alternations(lambda: next(server), lambda: next(process), len(bursts[i]), i % 2 == 0)

    g = c1_embedded(serve, alternate, KEY, tax is not None, StopRule(len(served), len(served), None))
    run_rounds([g], Progress({}))
    return g.record  # type: ignore[return-value]


def throughput_rounds(c: int, runs: list[tuple[float | None, float | None]], gauges: list[float]) -> ThroughputRounds:
    """Rounds at ``c``: per round (latency infer/s, throughput infer/s), None = invalid; in-process best-batch gauges."""
    gauge = iter(gauges)

    def serve(variant: str, c: int, i: int) -> Point:
        x = runs[i][0 if variant == "latency" else 1]
        return _pt(c, 1000 * c / x, x, 1.0, 4.0, 4.0 if variant == "throughput" else 1.0) if x else Point(c, False, "exit 2: unstable")

    g = throughput_at(c, serve, lambda: next(gauge), StopRule(len(runs), len(runs), None))
    run_rounds([g], Progress({}))
    return g.record  # type: ignore[return-value]


def rounds_result(settings: BenchConfig | None = None) -> BenchResult:
    """A default-profile result: every point from the rounds, c=1 with the batching tax, c=8 and c=16 compared."""
    res = _res([], [], settings=settings or BenchConfig())
    res.paired_c1 = c1_rounds([(4.7, 4.5), (4.8, 4.6), (4.6, 4.4), None, (4.75, 4.5)], [[(4.6, 4.4), (4.5, 4.4), (4.7, 4.4)]] * 5, tax=[2.1, 2.0, 2.2, 2.0, 1.9])
    res.paired_throughput = {
        8: throughput_rounds(8, [(200, 260), (190, 250), (205, 262), (None, 255)], [300, 290, 310, 300]),
        16: throughput_rounds(16, [(200, 280), (210, 290), (190, 270), (200, 285)], [300, 300, 300, 300]),
    }
    res.variants = sweep_from_rounds(res.paired_c1, res.paired_throughput)
    res.ratios = ratios(res)
    res.diagnosis = diagnose(res, _configs(), {}, 2, 0.02)
    return res


def test_c1_is_the_product_of_two_factors_taken_at_one_time() -> None:
    res = rounds_result()
    pc = res.paired_c1
    assert pc is not None
    r0 = pc.rounds[0]
    # Served p50 / the server's ORT time, same window; the server's ORT time / in-process ORT, median of the alternations.
    assert r0.served_vs_in_server(KEY) == pytest.approx(4.7 / 4.5) and r0.in_server_vs_in_process() == pytest.approx(4.6 / 4.4)
    assert r0.ratio(KEY) == pytest.approx(4.7 / 4.5 * 4.6 / 4.4) and r0.overhead_ms(KEY) == pytest.approx(0.2)
    assert [a.server_first for a in r0.alternations] == [True, False, True] and not pc.rounds[1].alternations[0].server_first
    r = res.ratios.to_json()  # type: ignore[union-attr]
    assert r["latency_c1_p50_vs_ort_p50"] == pytest.approx(pc.ratio().value) and r["latency_c1_p50_vs_ort_p50_rounds"] == 4
    assert r["latency_c1_p50_vs_ort_p50_ci90_low"] <= r["latency_c1_p50_vs_ort_p50"] <= r["latency_c1_p50_vs_ort_p50_ci90_high"]
    assert r["in_server_ort_vs_in_process_ort"] == pytest.approx(4.6 / 4.4)
    assert r["batching_tax_c1_ms"] == pytest.approx(2.05) and r["batching_tax_c1_ms_ci90_low"] is not None
    # The breakdown puts in-process ORT at the median round's machine speed: its in-server ORT time over its factor.
    found = {(d.rule, d.variant): d.message for d in res.diagnosis}
    assert "which is in-process ORT p50 4.30 + 0.20 ms" in found[("latency_breakdown", "latency")]


def test_every_headline_has_an_interval_in_bench_json_summary_report_and_console_line() -> None:
    res = rounds_result()
    data = res.to_json()
    heads = res.ratios.headlines()  # type: ignore[union-attr]
    assert set(heads) == {"latency_c1_p50_vs_ort_p50", "throughput_vs_latency_c8", "throughput_vs_ort_best_c8", "throughput_vs_latency_c16", "throughput_vs_ort_best_c16"}
    for name, e in heads.items():
        assert e.has_interval, name
        for where in (data["ratios"], data["summary"]["ratios"]):
            assert where[f"{name}_ci90_low"] <= where[name] <= where[f"{name}_ci90_high"], name
    # The summary keeps the factors' values without their intervals, and no round counts (dvc exp show's width).
    summary = data["summary"]["ratios"]
    assert "in_server_ort_vs_in_process_ort" in summary and "in_server_ort_vs_in_process_ort_ci90_low" not in summary
    assert not [k for k in summary if k.endswith(("_rounds", "_unpaired"))]
    md = render.markdown(res)
    assert "- throughput / latency variant: c=8 **1.30x** (90% CI" in md and "## Method" in md
    assert "cancels in that round's ratio" in md and "scipy.stats.bootstrap" in md
    line = render.console_line(res, 123.0)
    for e in heads.values():
        assert e.text() in line
    assert "(123 s)" in line


def test_machine_drift_only_when_an_interval_is_too_wide() -> None:
    res = rounds_result()
    assert "machine_drift" not in {d.rule for d in res.diagnosis}  # every interval within +-10%
    # The machine's speed split the c=1 pairs unevenly: per-round ratios from 0.9x to 1.6x.
    res.paired_c1 = c1_rounds([(4.7, 4.5), (6.0, 4.6), (4.2, 4.4), (7.0, 4.5), (5.0, 4.4)], [[(4.6, 4.4)]] * 5)
    res.ratios = ratios(res)
    found = {(d.rule, d.variant): d.message for d in diagnose(res, _configs(), {}, 2, 0.02)}
    msg = found[("machine_drift", "latency")]
    assert "wide, over the +-10% that can mean anything (bench.rounds.max_half_width)" in msg and res.ratios.latency_c1.value is not None
    # A wider limit accepts it; no valid round at all says so.
    res.settings = BenchConfig(rounds=RoundsConfig(max_half_width=0.5))
    assert ("machine_drift", "latency") not in {(d.rule, d.variant) for d in diagnose(res, _configs(), {}, 2, 0.02)}
    res.paired_c1 = c1_rounds([None, None], [[(4.6, 4.4)]] * 2)
    res.ratios = ratios(res)
    found = {(d.rule, d.variant): d.message for d in diagnose(res, _configs(), {}, 2, 0.02)}
    assert "no round gave a value (2 left out" in found[("machine_drift", "latency")] and res.ratios.latency_c1.value is None


def test_default_profile_points_are_the_median_rounds() -> None:
    res = rounds_result()
    lat, thr = res.variants["latency"], res.variants["throughput"]
    assert lat.source == thr.source == "rounds" and [p.concurrency for p in lat.points] == [1, 8, 16]
    # c=8 latency: 190, 200, 205 infer/s valid (one invalid): the median one.
    assert lat.at(8).metrics["throughput_infer_s"] == 200 and thr.at(8).avg_batch == 4.0  # type: ignore[union-attr]
    assert res.summary()["variants"]["latency"]["peak_infer_s"] == 200
    md = render.markdown(res)
    assert "| latency | 8 |" in md and "ok (rounds) |" in md and "Points marked *rounds*" in md


def test_throughput_rounds_outrank_the_sweep_and_show_in_the_report() -> None:
    # The sweep's points (minutes apart, separate servers) say 1.05x at c=16; the rounds say 1.4x.
    res = _res([_pt(16, 90, 200, 80, 6)], [_pt(16, 60, 210, 30, 20, 8)], settings=BenchConfig(rounds=RoundsConfig(throughput=ThroughputRoundsConfig(concurrency=[16]))))
    res.paired_throughput = {16: throughput_rounds(16, [(200, 280), (210, 290), (190, 270)], [300, 310, 290])}
    res.ratios = ratios(res)
    r = res.ratios.to_json()
    assert r["throughput_vs_latency_c16"] == pytest.approx(1.4) and r["throughput_vs_latency_c16_unpaired"] == pytest.approx(1.05)
    assert r["throughput_vs_ort_best_c16"] == pytest.approx(280 / 300)
    md = render.markdown(res)
    assert "| 16 | 1 | gauge then throughput then latency | 210.0 | 290.0 | 310 | 1.38x | 0.94x |" in md
    # Rounds that show no gain are a finding even where the sweep looked fine.
    res.paired_throughput = {16: throughput_rounds(16, [(200, 190), (210, 200), (190, 185)], [300, 300, 300])}
    res.ratios = ratios(res)
    found = {d.rule: d.message for d in diagnose(res, _configs(), {}, 2, 0.02)}
    assert "throughput / latency 0.95x (90% CI" in found["throughput_not_better"]


def test_external_c1_rounds_time_in_process_ort_around_the_run() -> None:
    gauges = iter([4.3, 4.5, 4.4, 4.4])
    g = c1_external(lambda i: _pt(1, [4.9, 5.0][i], 200, 0.03, 4.6), lambda: next(gauges), StopRule(2, 2, None))
    run_rounds([g], Progress({}))
    rec: C1Rounds = g.record  # type: ignore[assignment]
    assert [r.ratio(None) for r in rec.rounds] == [pytest.approx(4.9 / 4.4), pytest.approx(5.0 / 4.4)]
    res = _res([], [], settings=BenchConfig(server="external", url="h:1"))
    res.paired_c1 = rec
    res.ratios = ratios(res)
    assert res.ratios.served_vs_in_server.value is None  # no in-server ORT timer on an external Triton
    md = render.markdown(res)
    assert "| 0 | 4.30 | 4.90 | 4.50 | 1.11x |" in md and "c=1 (external: no in-server ORT timer)" in md


def test_rounds_round_trip_through_bench_json() -> None:
    import json

    res = rounds_result()
    data = res.to_json()
    back = BenchResult.from_json(json.loads(json.dumps(data)))
    assert back.to_json() == data and render.markdown(back) == render.markdown(res)


def test_progress_is_one_line_with_phase_point_round_elapsed_and_eta(capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from rich.console import Console

    now = [0.0]
    p = Progress({"baseline": 10.0, "rounds": 100.0, "report": 5.0}, console=Console(file=io.StringIO()), clock=lambda: now[0])
    with p:
        p.phase("baseline")
        now[0] = 4.0
        assert p.line() == "[bench] baseline | 4 s elapsed | ETA ~111 s"
        p.phase("rounds")
        p.at("c=8", "round 3/<=12", left_s=60.0)  # the rounds know better than the first guess
        now[0] = 14.0
        assert p.line() == "[bench] rounds c=8 round 3/<=12 | 14 s elapsed | ETA ~55 s"
    # Not a terminal: a plain line per change, nothing rewritten.
    assert capsys.readouterr().out.splitlines() == [
        "[bench] baseline | 0 s elapsed | ETA ~115 s",
        "[bench] rounds | 4 s elapsed | ETA ~105 s",
        "[bench] rounds c=8 round 3/<=12 | 4 s elapsed | ETA ~65 s",
    ]
    # A terminal: one live line, rewritten in place, with each measurement's own line printed above it.
    buf = io.StringIO()
    with Progress({"rounds": 10.0}, console=Console(file=buf, force_terminal=True, width=120)) as p:
        p.phase("rounds")
        p.log("[bench] c1_round0_latency c=1: p50 5.00 ms")
    text = buf.getvalue()
    assert "\x1b[2K" in text and "[bench] rounds | 0 s elapsed" in text and "[bench] c1_round0_latency c=1: p50 5.00 ms" in text
    assert capsys.readouterr().out == ""
