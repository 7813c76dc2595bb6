"""Structured-config schemas of the release store and of ``release canary``.

Kept apart from schema.py (which imports them into the root config) so each module stays small; the same rules hold:
types and defaults here, closed sets in enums.py, ranges and cross-field rules in checks.py and release_checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.core.config.enums import CanaryTraffic


@dataclass
class CanaryConfig:
    """``release canary``: the traffic that judges a candidate beside the live version, and the verdict's bounds."""

    traffic: CanaryTraffic = CanaryTraffic.replay
    duration_s: float = 60.0  # seconds of traffic (after one pass of every sample row to both versions)
    share: float = 0.1  # traffic=real: the candidate's share of the load (the baseline gets as much, production the rest)
    request_rate: float = 40.0  # traffic=real: requests per second of the perf_analyzer load, both versions together
    rounds: int = 10  # time slices of the paired p99 ratio (its 90% interval is over them)
    min_round_requests: int = 20  # a slice gives a ratio only with at least this many answers per version
    max_p99_ratio: float = 1.25  # pass: the median over rounds of candidate p99 / live p99 at most this
    max_error_rate: float = 0.0  # pass: the candidate's failed share of its requests at most this
    load_timeout_s: float = 120.0  # loading the candidate (and the switch) on a server


@dataclass
class ReleaseConfig:
    """Release store settings."""

    store: str = "release-store"  # path or fsspec URL; see conf/release/default.yaml
    environments: list[str] = field(default_factory=lambda: ["dev", "staging", "production"])
    # Object stores: a promote/rollback holds a lock object this long past its last heartbeat; a lock whose
    # holder died is taken over after it (pipeline/release/store/lock.py).
    lock_lease_s: float = 60.0
    # Signatures as policy: every command that reads or switches releases refuses unsigned or invalid ones.
    require_signature: bool = False
    public_key: str = ""  # PEM EC public key (path from the project root) the store's releases are checked with
    # The last environment (production) refuses a release built with `release build --unchecked-evidence`
    # (promote --allow-unchecked-evidence overrides).
    production_requires_checked_evidence: bool = True
    canary: CanaryConfig = field(default_factory=CanaryConfig)
