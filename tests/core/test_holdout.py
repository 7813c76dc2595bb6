"""The split of real samples between calibration and the rows the parity gate holds out (pipeline/core/holdout.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.core import holdout
from pipeline.core.config import TensorSpec


def feeds(*sizes: int, width: int = 3) -> list[dict[str, np.ndarray]]:
    """Samples whose rows are numbered in the hook's order (row i holds i everywhere), so a part says which rows it got."""
    out, start = [], 0
    for b in sizes:
        out.append({"x": np.repeat(np.arange(start, start + b, dtype=np.float32)[:, None], width, axis=1)})
        start += b
    return out


def rows_in(part: holdout.Part) -> list[int]:
    return [int(r) for f in part.feeds for r in f["x"][:, 0]]


@pytest.mark.parametrize(("share", "held"), [(0.5, [1, 3, 5, 7, 9, 11]), (0.25, [3, 7, 11]), (1 / 3, [2, 5, 8, 11])])
def test_held_out_rows_are_spread_evenly_over_the_hook_order(share: float, held: list[int]) -> None:
    s = holdout.split(feeds(1, 2, 4, 5), share)
    assert rows_in(s.holdout) == s.holdout.units == held
    assert rows_in(s.calibration) == s.calibration.units == [i for i in range(12) if i not in held]


def test_a_sample_cut_in_two_keeps_its_shape_and_order() -> None:
    s = holdout.split(feeds(1, 2, 4, 5, width=7), 0.5)
    assert [f["x"].shape for f in s.calibration.feeds] == [(1, 7), (1, 7), (2, 7), (2, 7)]
    assert [f["x"].shape for f in s.holdout.feeds] == [(1, 7), (2, 7), (3, 7)]  # the first sample's one row calibrates
    assert (s.calibration.rows, s.holdout.rows) == (6, 6)


def test_without_a_batch_axis_whole_samples_are_split() -> None:
    s = holdout.split(feeds(2, 2, 2, 2), 0.5, batched=False)
    assert s.holdout.units == [1, 3] and rows_in(s.holdout) == [2, 3, 6, 7] and s.record()["unit"] == "sample"
    assert not holdout.batched([TensorSpec(name="x", shape=[4, 3])]) and holdout.batched([TensorSpec(name="x", shape=["batch", 3])])


def test_digests_follow_content_not_grouping() -> None:
    s = holdout.split(feeds(4, 4), 0.5)
    regrouped = [{"x": np.concatenate([f["x"] for f in s.holdout.feeds])}]
    assert holdout.digest(regrouped) == s.record()["held_out"]["sha256"] == holdout.digest(s.holdout.feeds)
    assert holdout.digest(s.calibration.feeds) != holdout.digest(s.holdout.feeds)
    changed = feeds(4, 4)
    changed[1]["x"][3] += 1  # row 7: held out
    again = holdout.split(changed, 0.5)
    assert holdout.digest(again.calibration.feeds) == holdout.digest(s.calibration.feeds)
    assert holdout.digest(again.holdout.feeds) != holdout.digest(s.holdout.feeds)
