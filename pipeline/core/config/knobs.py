"""Ranges and closed sets as schema metadata, and the one walker that checks them.

A field declared with :func:`knob` carries its default and its bounds together, so a new knob is one line in the
schema: composition fills its default into params.yaml (store.py) and :func:`check_knobs` checks its range, naming
the closest valid value. What one field cannot say alone (a bound set by another field, a rule across sections)
is a rule in rules.py.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from pipeline.core.config.problems import Problems, show

BOUNDS = "bounds"  # the dataclass field metadata key


@dataclass(frozen=True)
class Bounds:
    """What a knob's value must satisfy: numeric bounds (on every element of a list), a closed set, list rules.

    ``ge``/``gt``/``le``/``lt`` bound a number, every value of a mapping, or every number in a list (or in each inner
    list of a list of lists; list bounds are inclusive, ``ge``/``le``);
    ``one_of`` is a closed set of plain values (Enums check themselves at load), reported with ``why``;
    ``nonempty`` refuses an empty list or string with ``empty`` (the field's default is appended); ``unique`` refuses
    repeats in a list.
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    one_of: tuple[Any, ...] | None = None
    why: str = ""
    nonempty: bool = False
    unique: bool = False
    empty: str = "must not be empty"

    @property
    def low(self) -> float | None:
        return self.gt if self.gt is not None else self.ge

    @property
    def high(self) -> float | None:
        return self.lt if self.lt is not None else self.le

    @property
    def ranged(self) -> bool:
        return self.low is not None or self.high is not None

    def check(self, key: str, value: Any, default: Any, p: Problems) -> bool:
        """Whether ``value`` (of the field whose default is ``default``) passes; records the problem if not."""
        if value is None:
            return True  # an Optional knob left unset
        if self.one_of is not None and value not in self.one_of:
            return p.add(key, value, self.why or f"not one of {show(list(self.one_of))}")
        if isinstance(value, list):
            return self._check_list(key, value, default, p)
        if isinstance(value, dict):  # a mapping of numbers (e.g. model.sample_dims): each value ranged
            return all([self.check(f"{key}.{k}", v, default, p) for k, v in value.items()])  # noqa: C419 - report every one
        if isinstance(value, str):
            return True if value or not self.nonempty else p.add(key, value, f"{self.empty} (default: {show(default)})")
        if self.ranged:
            return p.number(key, value, self.low, self.high, low_open=self.gt is not None, high_open=self.lt is not None)
        return True

    def _check_list(self, key: str, values: list[Any], default: Any, p: Problems) -> bool:
        if not values:
            return True if not self.nonempty else p.add(key, [], f"{self.empty} (default: {show(default)})")
        if self.ranged and isinstance(values[0], list):  # a list of lists: each inner list is ranged and non-empty
            return all([p.each(f"{key}[{i}]", inner, self.low, self.high) for i, inner in enumerate(values)])  # noqa: C419 - report every one
        if self.ranged and not p.each(key, values, self.low, self.high, non_empty=False):
            return False
        return p.unique(key, values) if self.unique else True


def knob(default: Any, **bounds: Any) -> Any:
    """A dataclass field with ``default`` (a list or dict is copied per instance) and its :class:`Bounds`, given by
    name: ``knob(8, ge=1)``, ``knob([1, 2], ge=1, nonempty=True)``, ``knob(1, one_of=(-1, 0, 1, 2), why="...")``.

    Raises:
        TypeError: a bound name :class:`Bounds` does not have, or an open bound on a list (at import, so neither ships).
    """
    meta = {BOUNDS: Bounds(**bounds)}
    if isinstance(default, list) and (bounds.get("gt") is not None or bounds.get("lt") is not None):
        raise TypeError("a list's elements take inclusive bounds (ge, le), which Problems.each checks")
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (a fresh one for a default factory)."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def check_knobs(obj: Any, p: Problems, prefix: str = "") -> None:
    """Check every bounded field of dataclass ``obj`` and, recursively, of the dataclasses inside it (in fields, dict
    values and list items), keys named from ``prefix``. Adds to ``p``; never raises."""
    for f in dataclasses.fields(obj):
        key, value = f"{prefix}{f.name}", getattr(obj, f.name)
        bounds = f.metadata.get(BOUNDS)
        if bounds is not None:
            bounds.check(key, value, default_of(f), p)
        _descend(value, key, p)


def _descend(value: Any, key: str, p: Problems) -> None:
    if dataclasses.is_dataclass(value):
        check_knobs(value, p, key + ".")
    elif isinstance(value, dict):
        for k, v in value.items():
            if dataclasses.is_dataclass(v):
                check_knobs(v, p, f"{key}.{k}.")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if dataclasses.is_dataclass(v):
                check_knobs(v, p, f"{key}[{i}].")
