"""The knobs the tune moves, the values each may take from a given incumbent, and a candidate's Triton config.

A candidate differs from the incumbent in one knob (coordinate descent). What the machine and the graph allow is
applied here, not left for Triton to refuse: instances x intra-op threads (and x inter-op threads) never exceed the
cores, preferred batch sizes are clipped to the candidate's max_batch_size, and a graph without a batch axis (or a
variant without dynamic batching) has no batching knobs to move. An instance-count move splits the cores between the
instances (fewer intra-op threads each), the one move that changes two knobs besides batching. A candidate's config is the repository's rendering of
TuneKnobs.onto_variant (pipeline/repository/writer.CandidateWriter): what is measured is what ships.
"""

from __future__ import annotations

from dataclasses import replace

from pipeline.core.config import TuneSpace
from pipeline.records.tune import TuneKnobs

# The order coordinate descent visits the knobs: the ones that change throughput most on a CPU first. "batching" is
# max_batch_size and the preferred sizes together: the batcher sends a batch as soon as the queue holds a preferred
# size, so a larger max_batch_size alone forms no larger batch, and a move of one alone would never be seen to pay.
AXES = ("instance_count", "batching", "max_queue_delay_us", "intra_op_threads", "inter_op_threads", "graph_optimization_level")


def value(k: TuneKnobs, axis: str) -> str:
    """What ``k`` has on ``axis``, for a log line."""
    if axis == "batching":
        return f"max_batch_size {k.max_batch_size}, preferred {list(k.preferred_batch_sizes or ())}"
    return str(getattr(k, axis))


def clip(sizes: tuple[int, ...] | list[int], max_batch_size: int) -> tuple[int, ...]:
    """Preferred sizes a candidate with ``max_batch_size`` can form, ascending, without repeats."""
    return tuple(sorted({int(b) for b in sizes if 0 < b <= max_batch_size}))


def fits(k: TuneKnobs, cores: int) -> bool:
    """Whether the instances' ORT threads fit the cores (a thread per core runs; more only take turns)."""
    return k.instance_count * max(k.intra_op_threads, k.inter_op_threads) <= cores


def challengers(axis: str, incumbent: TuneKnobs, space: TuneSpace, cores: int) -> list[TuneKnobs]:
    """Candidates that differ from ``incumbent`` in ``axis`` only, in the space's order, each allowed here."""
    batching = incumbent.preferred_batch_sizes is not None and incumbent.max_batch_size > 0
    if axis in ("batching", "max_queue_delay_us") and not batching:
        return []  # no batch axis, or dynamic batching off in the variant: nothing to batch
    out: list[TuneKnobs] = []
    if axis == "batching":
        for b in space.max_batch_size:
            # No preferred size (the batcher forms what the queue holds, up to b), or a set of the space that b can form.
            for pref in [(), *(clip(p, b) for p in space.preferred_batch_sizes)]:
                out.append(replace(incumbent, max_batch_size=b, preferred_batch_sizes=pref))
    elif axis == "instance_count":
        # More instances split the cores between them: each gets cores // n threads (at most what it had), so a move
        # to two instances from one that uses every core is a candidate, not a config that oversubscribes.
        for n in space.instance_count:
            share = max(1, cores // n)
            out.append(
                replace(incumbent, instance_count=n, intra_op_threads=min(incumbent.intra_op_threads, share) or share, inter_op_threads=min(incumbent.inter_op_threads, share) or 1)
            )
    else:
        out = [replace(incumbent, **{axis: v}) for v in getattr(space, axis)]
    seen = {incumbent}
    unique = []
    for k in out:
        if k not in seen and fits(k, cores):
            seen.add(k)
            unique.append(k)
    return unique
