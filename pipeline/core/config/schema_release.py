"""Structured-config schemas of the release store and of ``release canary``.

Types, defaults and ranges here (:func:`~pipeline.core.config.knobs.knob`); closed sets in enums.py; rules across fields
(the S3 URL grammar, signatures, the canary's requests per round) in rules.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.knobs import knob


@dataclass
class CanaryConfig:
    """``release canary --env <env> --version N --reload host:port``: the candidate and a baseline of the live version are
    loaded beside the served model (as <model>__canary_<id>-candidate / -baseline; production stays on <model>), judged
    side by side, and the candidate is promoted only if every check passes. The traffic and the verdict's bounds."""

    # replay: every sample row to both copies in turn; real: a perf_analyzer load, `share` of it to each copy.
    traffic: CanaryTraffic = CanaryTraffic.replay
    duration_s: float = knob(60.0, gt=0, le=86400)  # seconds of traffic (after one pass of every sample row to both versions)
    # traffic=real: the candidate's share of the load; a baseline of the live version gets as much, production the rest
    # (0 leaves both without traffic; above 0.5 they would need more than all of it). share x request_rate x duration_s
    # / rounds must reach min_round_requests.
    share: float = knob(0.1, gt=0, le=0.5)
    request_rate: float = knob(40.0, gt=0)  # traffic=real: requests per second of the whole load, both versions together
    # Time slices of the paired p99 ratio: each gives one candidate/live ratio; the headline is their median with a 90%
    # interval (which needs two of them).
    rounds: int = knob(10, ge=2)
    min_round_requests: int = knob(20, ge=1)  # a slice gives a ratio only with at least this many answers per version
    # A latency ratio is > 0 and an error rate >= 0: a bound below either fails every candidate by construction.
    max_p99_ratio: float = knob(1.25, gt=0)  # pass: the median over rounds of candidate p99 / live p99 at most this
    max_error_rate: float = knob(0.0, ge=0, le=1)  # pass: the candidate's failed share of its requests at most this
    load_timeout_s: float = knob(120.0, gt=0)  # loading the candidate on a server, and each step of the switch


@dataclass
class ReleaseConfig:
    """Release store settings."""

    # A local path (relative to the project root) or any fsspec URL (s3://bucket/prefix, ...). A non-AWS S3 endpoint goes
    # into the URL the way tritonserver takes it: s3://http://host:port/bucket/prefix (else AWS_ENDPOINT_URL_S3 /
    # AWS_ENDPOINT_URL from the environment; credentials always come from the environment). It holds
    # releases/<model>/<N>/ (immutable), envs/<env>/ (one Triton model repository per environment) and
    # history/<env>/<model>.json. Not tracked by git or DVC: releases are their own record.
    store: str = knob("release-store", nonempty=True, empty="must name a path or fsspec URL")
    # Promotion order: `release promote --to <env>` without --version takes what is live in the previous one. Each is a
    # directory name (letters, digits, _ . -).
    environments: list[str] = knob(["dev", "staging", "production"], nonempty=True, unique=True, empty="must list at least one environment")
    # Object stores (s3://): promote/rollback take a lock object in the store with a conditional write (If-None-Match)
    # and renew it while they run; a lock whose holder died is taken over once it is this many seconds past its last
    # heartbeat (pipeline/release/store/lock.py).
    lock_lease_s: float = knob(60.0, ge=1, le=3600)
    # Signatures as policy: with require_signature, promote, rollback, canary and verify refuse a release without a
    # valid model-signing signature by public_key (a --public-key flag overrides the path, never the policy).
    require_signature: bool = False
    public_key: str = ""  # PEM EC public key (path from the project root) the store's releases are checked with
    # The last environment (production) refuses a release built with `release build --unchecked-evidence` (evidence that
    # is not the DVC outputs dvc.lock records: a copied repository, a parity report from elsewhere); promote
    # --allow-unchecked-evidence overrides.
    production_requires_checked_evidence: bool = True
    canary: CanaryConfig = field(default_factory=CanaryConfig)
