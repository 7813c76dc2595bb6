"""The search's rules on a model of a server whose numbers are known (a cost per call and per instance), with a clock
the test moves: coordinate descent, halving, the constraint, the budget. The real server runs in test_tune_python.py."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest

from pipeline.core.config import TuneConfig, TuneSpace
from pipeline.records.tune import TuneKnobs, TuneRecord
from pipeline.tune import space
from pipeline.tune.run import decide, runner_up
from pipeline.tune.search import Clock, Measure, Sample, search

START = TuneKnobs(2, 2, (2,), 0, 1, 1, 1)


@dataclasses.dataclass
class CostModel:
    """infer/s of a server where a call costs ``fixed_ms`` plus ``row_ms`` a row, instances share one lock and each extra
    one adds ``instance_ms`` a call; p99 is one full batch's time (times ``p99_scale``). Each measurement moves the
    clock by ``run_s``; ``noise`` multiplies round r's numbers (the machine's mood, the same for every candidate of a
    round, as the pairs of a round are seconds apart)."""

    fixed_ms: float = 20.0
    row_ms: float = 0.5
    instance_ms: float = 5.0
    p99_scale: float = 1.0
    run_s: float = 3.0
    noise: tuple[float, ...] = (1.0,)
    now: float = 0.0
    measured: int = 0

    def sample(self, k: TuneKnobs, concurrency: int, round_: int) -> Sample:
        # The batcher sends a batch once the queue holds a preferred size (all c requests wait while one call runs).
        rows = max([b for b in k.preferred_batch_sizes or () if b <= concurrency] or [min(k.max_batch_size, concurrency)])
        call_ms = self.fixed_ms + self.row_ms * rows + self.instance_ms * (k.instance_count - 1)
        mood = self.noise[round_ % len(self.noise)]
        self.measured += 1
        self.now += self.run_s
        return Sample({concurrency: rows * 1000 / call_ms * mood}, {concurrency: call_ms * self.p99_scale / mood})

    @contextlib.contextmanager
    def session(self, candidates: dict[str, TuneKnobs]) -> Iterator[Measure]:
        rounds = dict.fromkeys(candidates, 0)  # a candidate's n-th measurement is in round n

        def measure(name: str) -> Sample:
            rounds[name] += 1
            return self.sample(candidates[name], 16, rounds[name] - 1)

        yield measure


def tune_cfg(**kw: object) -> TuneConfig:
    space_ = TuneSpace(
        instance_count=[1, 2],
        max_batch_size=[2, 8, 16],
        preferred_batch_sizes=[[2]],
        max_queue_delay_us=[0],
        intra_op_threads=[1],
        inter_op_threads=[1],
        graph_optimization_level=[1],
    )
    return dataclasses.replace(TuneConfig(enabled=True, concurrency=[16], rounds=3, passes=2, budget_s=1000.0, space=space_), **kw)


def test_challengers_keep_threads_within_the_cores_and_clip_preferred_sizes() -> None:
    s = TuneSpace(instance_count=[1, 2, 4], max_batch_size=[4, 8], preferred_batch_sizes=[[4, 8], [16]], intra_op_threads=[1, 2])
    k = TuneKnobs(1, 8, (4, 8), 500, 2, 1, 1)
    # More instances split the cores: 2 instances of 1 thread on 2 cores (4 instances cannot fit 2 cores at all).
    assert [(c.instance_count, c.intra_op_threads) for c in space.challengers("instance_count", k, s, cores=2)] == [(2, 1)]
    assert [(c.instance_count, c.intra_op_threads) for c in space.challengers("instance_count", k, s, cores=4)] == [(2, 2), (4, 1)]
    assert [c.intra_op_threads for c in space.challengers("intra_op_threads", k, s, cores=2)] == [1]
    assert space.challengers("intra_op_threads", dataclasses.replace(k, instance_count=2, intra_op_threads=1), s, cores=2) == []  # 2 x 2 > 2 cores
    # max_batch_size and the preferred sizes move together: none, or a set of the space clipped to what the batch can form.
    batching = [(c.max_batch_size, c.preferred_batch_sizes) for c in space.challengers("batching", k, s, cores=2)]
    assert batching == [(4, ()), (4, (4,)), (8, ())]  # (8, (4, 8)) is the incumbent; [16] fits neither size
    assert space.value(k, "batching") == "max_batch_size 8, preferred [4, 8]"
    no_batching = TuneKnobs(1, 8, None, None, 1, 1, 1)
    assert space.challengers("batching", no_batching, s, cores=2) == [] and space.challengers("max_queue_delay_us", no_batching, s, cores=2) == []


def test_the_knobs_round_trip_through_the_variant_and_json() -> None:
    from pipeline.core.config import VariantConfig

    v = VariantConfig(name="throughput", max_batch_size=16, instance_count=1)
    assert TuneKnobs.of_variant(v).onto_variant(v) == v
    k = TuneKnobs(2, 8, (4, 8), 500, 1, 1, -1)
    moved = k.onto_variant(v)
    assert TuneKnobs.of_variant(moved) == k and moved.warmup is not None and max(moved.warmup.batch_sizes) <= 8
    assert TuneKnobs.from_json(k.to_json()) == k
    assert TuneKnobs.of_variant(dataclasses.replace(k, preferred_batch_sizes=None, max_queue_delay_us=None).onto_variant(v)).preferred_batch_sizes is None


def test_the_search_finds_the_known_best_from_the_configured_variant() -> None:
    """Batching pays (a fixed cost a call), a second instance costs: the best is one instance at the largest batch."""
    model = CostModel(noise=(1.0, 0.8, 1.15, 0.9))  # a machine whose speed moves between rounds: pairing cancels it
    t = tune_cfg()
    res = search(model, START, t, cores=2, clock=Clock(t.budget_s, lambda: model.now), log=lambda _: None)
    assert (res.winner.instance_count, res.winner.max_batch_size) == (1, 16) and not res.partial
    assert res.moved[0].startswith("instance_count: 2 -> 1")
    assert res.moved[1].startswith("batching: max_batch_size 2, preferred [2] -> max_batch_size 16, preferred []"), res.moved
    won = [tr for tr in res.trials if tr.verdict.startswith("moved the search")]
    assert len(won) == 2 and all(tr.confirmed is not None and tr.confirmed.low is not None and tr.confirmed.low > 1 + t.min_gain for tr in won)
    # Halving: of five challengers on batching, the worse half went after round 2 (only the best reached round 3).
    dropped = {(tr.knobs.max_batch_size, tr.knobs.preferred_batch_sizes) for tr in res.trials if tr.knob == "batching" and tr.verdict == "dropped after round 2"}
    assert len(dropped) >= 2 and (16, ()) not in dropped and (16, (2,)) in dropped  # batches of 2 however large the max
    record = TuneRecord(True, "config", "perf_throughput", 100.0, [16], START, START, "")
    decide(record, res, 100.0)
    assert record.source == "search" and record.winner == res.winner and "instance_count: 2 -> 1" in record.reason
    assert runner_up(res) is not None and runner_up(res) != res.winner


def test_a_budget_too_small_to_finish_keeps_the_best_so_far_and_says_partial() -> None:
    model = CostModel(run_s=3.0)
    t = tune_cfg(budget_s=40.0)  # the first step (2 candidates x 3 rounds, then 3 fresh rounds of 2; 3 s a run) and no more
    res = search(model, START, t, cores=2, clock=Clock(t.budget_s, lambda: model.now), log=lambda _: None)
    assert res.partial and res.winner.instance_count == 1 and res.winner.max_batch_size == START.max_batch_size
    record = TuneRecord(True, "config", "perf_throughput", 100.0, [16], START, START, "", budget_s=40.0)
    decide(record, res, 100.0)
    assert record.partial and record.source == "search" and "partial: the 40 s budget ran out" in record.reason


def test_a_constraint_no_candidate_meets_ships_the_configured_variant_and_names_the_best_p99() -> None:
    model = CostModel(p99_scale=10.0)  # every p99 is 10 full batches: over a 50 ms bound whatever the config
    t = tune_cfg(constraints=dataclasses.replace(tune_cfg().constraints, perf_latency_p99=50.0))
    res = search(model, START, t, cores=2, clock=Clock(t.budget_s, lambda: model.now), log=lambda _: None)
    record = TuneRecord(True, "config", "perf_throughput", 50.0, [16], START, START, "")
    decide(record, res, 50.0)
    assert record.source == "config-kept" and record.winner == START
    assert f"no candidate met p99 <= 50 ms: the configured variant ships unchanged; the best p99 seen was {res.best_p99_ms:.1f} ms" in record.reason
    assert res.best_p99_ms == pytest.approx(10 * (20 + 0.5 * 2))  # one instance, batch 2: the lowest p99 in the space


def test_a_candidate_that_meets_the_constraint_replaces_an_incumbent_that_does_not() -> None:
    """Latency first: the configured variant misses the bound, a challenger meets it, even with fewer infer/s."""
    model = CostModel(p99_scale=1.0)
    t = tune_cfg(
        constraints=dataclasses.replace(tune_cfg().constraints, perf_latency_p99=22.0), space=dataclasses.replace(tune_cfg().space, instance_count=[2], max_batch_size=[1, 16])
    )
    start = TuneKnobs(1, 16, (), 0, 1, 1, 1)  # 16 rows a call: 28 ms, over 22 ms
    res = search(model, start, t, cores=2, clock=Clock(t.budget_s, lambda: model.now), log=lambda _: None)
    assert res.start_feasible is False and res.winner != start
    assert model.sample(res.winner, 16, 0).worst_p99() <= 22.0  # it meets the bound (batches of at most 2 rows: 21 ms)
    assert res.moved[0].startswith("batching:") and "0.1" in res.moved[0]  # fewer infer/s than the incumbent, and still moved
