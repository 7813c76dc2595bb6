"""Bad bench settings fail when params.yaml is composed, before any server starts (moved from the bench stage's checks).

The bench stage no longer re-checks config values: these are the cases its own checks used to catch, now asserted
where the config package catches them (pipeline.params.compose, the function `dvc exp run` uses).
"""

from __future__ import annotations

import pytest

from pipeline.core.config import ConfigProblems
from pipeline.core.errors import ConfigError
from pipeline.params import compose


def _problems(*overrides: str) -> dict[str, str]:
    """Key -> problem line for ``overrides`` (composition must fail)."""
    with pytest.raises(ConfigError) as e:
        compose(list(overrides))
    assert isinstance(e.value, ConfigProblems), e.value.render()
    return {p.key: p.line() for p in e.value.problems}


@pytest.mark.parametrize(
    ("rounds", "max_rounds", "drift", "key", "needle"),
    [
        (-1, 10, 0.1, "bench.paired_rounds", "bench.paired_rounds=-1: must be >= 0"),
        (5, 3, 0.1, "bench.paired_max_rounds", "must be >= bench.paired_rounds=5"),
        (5, 10, 0.0, "bench.paired_max_drift", "bench.paired_max_drift=0.0: must be > 0"),
        (1, 10, 0.1, "bench.paired_rounds", "must be 0 (no rounds) or >= 2: an interval needs two rounds"),
        (0, 10, 0.1, "bench.paired_rounds", "bench.profile=default measures the latency variant only in rounds"),
    ],
)
def test_bad_pairing_settings_fail_at_composition(rounds: int, max_rounds: int, drift: float, key: str, needle: str) -> None:
    found = _problems(f"bench.paired_rounds={rounds}", f"bench.paired_max_rounds={max_rounds}", f"bench.paired_max_drift={drift}")
    assert list(found) == [key] and needle in found[key], found


@pytest.mark.parametrize(
    ("rounds", "max_rounds", "conc", "key", "needle"),
    [
        (-1, 6, "[8]", "bench.paired_throughput_rounds", "bench.paired_throughput_rounds=-1: must be >= 0"),
        (3, 2, "[8]", "bench.paired_throughput_max_rounds", "must be >= bench.paired_throughput_rounds=3"),
        (3, 6, "[0,8]", "bench.paired_throughput_concurrency", "bench.paired_throughput_concurrency=[0, 8]"),
    ],
)
def test_bad_throughput_pairing_settings_fail_at_composition(rounds: int, max_rounds: int, conc: str, key: str, needle: str) -> None:
    found = _problems(f"bench.paired_throughput_rounds={rounds}", f"bench.paired_throughput_max_rounds={max_rounds}", f"bench.paired_throughput_concurrency={conc}")
    assert list(found) == [key] and needle in found[key], found


@pytest.mark.parametrize(
    ("server", "max_rounds", "conc", "key", "needle"),
    [
        ("external", 3, 8, "bench.tune", "needs bench.server=embedded"),
        ("embedded", 0, 8, "bench.tune_max_rounds", "bench.tune_max_rounds=0: must be >= 1"),
        ("embedded", 3, 0, "bench.tune_concurrency", "bench.tune_concurrency=0: must be >= 1"),
    ],
)
def test_bad_tuning_settings_fail_at_composition(server: str, max_rounds: int, conc: int, key: str, needle: str) -> None:
    found = _problems("bench.tune=true", f"bench.server={server}", "bench.url=127.0.0.1:1", f"bench.tune_max_rounds={max_rounds}", f"bench.tune_concurrency={conc}")
    assert list(found) == [key] and needle in found[key], found


def test_no_c1_rounds_compose_in_the_full_profile() -> None:
    """The full profile sweeps: there the c=1 ratio may be the sweep's unpaired one."""
    from pipeline.core.config import BenchProfile

    cfg = compose(["bench.profile=full", "bench.paired_rounds=0"])
    assert "profile: full" in cfg and "paired_rounds: 0" in cfg and BenchProfile("full").value == "full"


@pytest.mark.parametrize(
    ("overrides", "key", "needle"),
    [
        (["bench.target_half_width=0"], "bench.target_half_width", "must be in (0, 1]"),
        (["bench.target_half_width=0.05", "bench.max_half_width=0.04"], "bench.max_half_width", "must be in [0.05, 10]"),
        (["bench.rounds_budget_s=0"], "bench.rounds_budget_s", "must be > 0"),
        (["bench.alternations=0"], "bench.alternations", "must be >= 1"),
        (["bench.paired_stability_percentage=0"], "bench.paired_stability_percentage", "must be in [1, 100]"),
    ],
)
def test_bad_interval_settings_fail_at_composition(overrides: list[str], key: str, needle: str) -> None:
    found = _problems(*overrides)
    assert list(found) == [key] and needle in found[key], found


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("bench.profile=quick", "bench.profile"),
        ("bench.server=remote", "bench.server"),
        ("bench.embedded_backend=cpp", "bench.embedded_backend"),
        ("bench.input_shapes=padded", "bench.input_shapes"),
    ],
)
def test_bench_modes_are_closed_sets(override: str, key: str) -> None:
    found = _problems(override)
    assert list(found) == [key] and "not one of" in found[key], found


def test_external_server_needs_a_url() -> None:
    found = _problems("bench.server=external")
    assert list(found) == ["bench.url"] and "bench.server=external needs" in found["bench.url"], found
