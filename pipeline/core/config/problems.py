"""Collecting config problems, so one error lists every bad value with the closest valid one."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pipeline.core.errors import ConfigError

FIX = "change these keys in conf/ or in your overrides (`python -m pipeline.params KEY=VALUE`, `dvc exp run -S KEY=VALUE`)"


def show(value: Any) -> str:
    """A value as a user would type it: strings quoted, Enums by value, None as null."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return str(value)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""


@dataclass(frozen=True)
class Problem:
    """One bad value: the dotted key, the value found, and what is wrong (with the closest valid value)."""

    key: str
    value: Any
    message: str

    def line(self) -> str:
        """``key=value: message``."""
        return f"{self.key}={show(self.value)}: {self.message}"


class ConfigProblems(ConfigError):
    """Every problem found in one config, in one message. ``problems`` holds them for callers and tests."""

    def __init__(self, problems: Sequence[Problem], origin: str) -> None:
        self.problems = list(problems)
        n = len(self.problems)
        head = f"{n} problem{'s' if n != 1 else ''} in {origin}:"
        super().__init__("\n".join([head, *(f"  - {p.line()}" for p in self.problems)]), fix=FIX)


class Problems:
    """An accumulator with one method per kind of rule; every method returns whether the value passed."""

    def __init__(self) -> None:
        self.items: list[Problem] = []
        # Keys whose value was already reported and replaced by its default: rules on them would only
        # repeat the problem (e.g. a missing model.path seen again as "source=onnx needs model.path").
        self.skip: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.items)

    def has(self, key: str) -> bool:
        """Whether ``key`` (or a key under it) already has a problem."""
        return any(p.key == key or p.key.startswith(key + ".") or p.key.startswith(key + "[") for p in self.items)

    def add(self, key: str, value: Any, message: str) -> bool:
        """Record a problem (once per key and message); always False, for ``return p.add(...)``."""
        if any(key == s or key.startswith((s + ".", s + "[")) for s in self.skip):
            return False
        if not any(p.key == key and p.message == message for p in self.items):
            self.items.append(Problem(key, value, message))
        return False

    def raise_if_any(self, origin: str) -> None:
        """Raise :class:`ConfigProblems` listing every problem, if there is one."""
        if self.items:
            raise ConfigProblems(self.items, origin)

    def choice(self, key: str, value: Any, choices: Sequence[Any]) -> bool:
        """``value`` must be one of ``choices``; suggests the closest one."""
        if value in choices:
            return True
        names = [show(c).strip("'") for c in choices]
        return self.add(key, value, f"not one of [{', '.join(names)}]{did_you_mean(str(value), names)}")

    def number(
        self,
        key: str,
        value: Any,
        low: float | None = None,
        high: float | None = None,
        *,
        low_open: bool = False,
        high_open: bool = False,
    ) -> bool:
        """``low <= value <= high`` (either bound optional, ``*_open`` makes it strict); names the closest valid value."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # value != value: NaN
            return self.add(key, value, "must be a number")
        if value in (float("inf"), float("-inf")):
            return self.add(key, value, "must be finite" + (f" (closest valid: {_num(high if value > 0 else low)})" if (high if value > 0 else low) is not None else ""))
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and (value >= high if high_open else value > high)
        if not (too_low or too_high):
            return True
        if low is not None and high is not None:
            rng = f"{'(' if low_open else '['}{_num(low)}, {_num(high)}{')' if high_open else ']'}"
            want = f"must be in {rng}"
        elif low is not None:
            want = f"must be {'>' if low_open else '>='} {_num(low)}"
        else:
            want = f"must be {'<' if high_open else '<='} {_num(high)}"
        bound = low if too_low else high
        closest = "" if (low_open if too_low else high_open) else f" (closest valid: {_num(bound)})"
        return self.add(key, value, want + closest)

    def each(self, key: str, values: Sequence[Any], low: float | None = None, high: float | None = None, *, non_empty: bool = True) -> bool:
        """Every element of a list within ``[low, high]``; the list itself non-empty unless told otherwise."""
        if non_empty and not values:
            return self.add(key, list(values), "must not be empty")
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or (low is not None and v < low) or (high is not None and v > high)]
        if not bad:
            return True
        rng = f"in [{_num(low)}, {_num(high)}]" if low is not None and high is not None else (f">= {_num(low)}" if low is not None else f"<= {_num(high)}")
        nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        fixed = list(dict.fromkeys(_clamp(v, low, high) for v in nums))
        return self.add(key, list(values), f"every value must be {rng}; {show(bad)} {'is' if len(bad) == 1 else 'are'} not" + (f" (closest valid: {show(fixed)})" if fixed else ""))

    def unique(self, key: str, values: Sequence[Any]) -> bool:
        """No value twice."""
        # A list, not a set: values may be unhashable (a list of lists of preferred sizes).
        seen: list[Any] = []
        dup: list[Any] = []
        for v in values:
            (dup if v in seen else seen).append(v)
        return True if not dup else self.add(key, list(values), f"lists {show(sorted(set(map(str, dup))))} more than once")


def _clamp(v: float, low: float | None, high: float | None) -> float:
    """``v`` moved into ``[low, high]`` (either bound optional)."""
    v = v if low is None else max(v, low)
    return v if high is None else min(v, high)


def _num(x: float | None) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)
