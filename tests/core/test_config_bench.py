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
        (-1, 10, 0.1, "bench.rounds.c1.min", "bench.rounds.c1.min=-1: must be >= 0"),
        (5, 3, 0.1, "bench.rounds.c1.max", "must be >= bench.rounds.c1.min=5"),
        (5, 10, -0.1, "tune.min_gain", "tune.min_gain=-0.1: must be in [0, 1]"),
        (1, 10, 0.1, "bench.rounds.c1.min", "must be 0 (no rounds) or >= 2: an interval needs two rounds"),
        (0, 10, 0.1, "bench.rounds.c1.min", "bench.profile=default measures the latency variant only in rounds"),
    ],
)
def test_bad_pairing_settings_fail_at_composition(rounds: int, max_rounds: int, drift: float, key: str, needle: str) -> None:
    found = _problems(f"bench.rounds.c1.min={rounds}", f"bench.rounds.c1.max={max_rounds}", f"tune.min_gain={drift}")
    assert list(found) == [key] and needle in found[key], found


@pytest.mark.parametrize(
    ("rounds", "max_rounds", "conc", "key", "needle"),
    [
        (-1, 6, "[8]", "bench.rounds.throughput.min", "bench.rounds.throughput.min=-1: must be >= 0"),
        (3, 2, "[8]", "bench.rounds.throughput.max", "must be >= bench.rounds.throughput.min=3"),
        (3, 6, "[0,8]", "bench.rounds.throughput.concurrency", "bench.rounds.throughput.concurrency=[0, 8]"),
    ],
)
def test_bad_throughput_pairing_settings_fail_at_composition(rounds: int, max_rounds: int, conc: str, key: str, needle: str) -> None:
    found = _problems(f"bench.rounds.throughput.min={rounds}", f"bench.rounds.throughput.max={max_rounds}", f"bench.rounds.throughput.concurrency={conc}")
    assert list(found) == [key] and needle in found[key], found


@pytest.mark.parametrize(
    ("server", "max_rounds", "conc", "key", "needle"),
    [
        (300, 1, "[16]", "tune.rounds", "tune.rounds=1: must be in [2, 20]"),
        (300, 3, "[0]", "tune.concurrency", "tune.concurrency=[0]"),
        (5, 3, "[16]", "tune.budget_s", "cannot hold one paired comparison"),
    ],
)
def test_bad_tuning_settings_fail_at_composition(server: int, max_rounds: int, conc: str, key: str, needle: str) -> None:
    found = _problems("tune.enabled=true", f"tune.budget_s={server}", f"tune.rounds={max_rounds}", f"tune.concurrency={conc}")
    assert list(found) == [key] and needle in found[key], found


def test_no_c1_rounds_compose_in_the_full_profile() -> None:
    """The full profile sweeps: there the c=1 ratio may be the sweep's unpaired one."""
    from pipeline.core.config import BenchProfile

    import yaml

    bench = yaml.safe_load(compose(["bench.profile=full", "bench.rounds.c1.min=0"]))["bench"]
    assert bench["profile"] == "full" and bench["rounds"]["c1"]["min"] == 0 and BenchProfile("full").value == "full"


@pytest.mark.parametrize(
    ("overrides", "key", "needle"),
    [
        (["bench.rounds.target_half_width=0"], "bench.rounds.target_half_width", "must be in (0, 1]"),
        (["bench.rounds.target_half_width=0.05", "bench.rounds.max_half_width=0.04"], "bench.rounds.max_half_width", "must be in [0.05, 10]"),
        (["bench.rounds.budget_s=0"], "bench.rounds.budget_s", "must be > 0"),
        (["bench.rounds.alternations=0"], "bench.rounds.alternations", "must be >= 1"),
        (["bench.rounds.stability_percentage=0"], "bench.rounds.stability_percentage", "must be in [1, 100]"),
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
