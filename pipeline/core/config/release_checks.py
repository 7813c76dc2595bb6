"""The rules of ``release.canary``: bounds a candidate can meet, and traffic that can measure it.

Called from checks.check_release with the same :class:`Problems` (and by ``release canary`` on its
command-line overrides); none raises.
"""

from __future__ import annotations

from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.problems import Problems
from pipeline.core.config.schema_release import CanaryConfig


def check_canary(c: CanaryConfig, p: Problems, key: str = "release.canary") -> None:
    """Bounds a candidate can meet and traffic that can measure it (the CLI runs this on its overrides too)."""
    p.number(f"{key}.duration_s", c.duration_s, 0, 86400, low_open=True)
    p.number(f"{key}.rounds", c.rounds, 2)  # an interval needs two rounds
    p.number(f"{key}.min_round_requests", c.min_round_requests, 1)
    # A latency ratio is > 0 and an error rate >= 0: a bound below either fails every candidate by construction.
    p.number(f"{key}.max_p99_ratio", c.max_p99_ratio, 0, low_open=True)
    p.number(f"{key}.max_error_rate", c.max_error_rate, 0, 1)
    p.number(f"{key}.load_timeout_s", c.load_timeout_s, 0, low_open=True)
    # The baseline gets as much as the candidate: 0 leaves both without traffic, above 0.5 they would need more than all of it.
    share_ok = p.number(f"{key}.share", c.share, 0, 0.5, low_open=True)
    rate_ok = p.number(f"{key}.request_rate", c.request_rate, 0, low_open=True)
    if c.traffic == CanaryTraffic.real and share_ok and rate_ok and not p.has(key):
        per_round = c.share * c.request_rate * c.duration_s / c.rounds
        if per_round < c.min_round_requests:
            p.add(
                f"{key}.share",
                c.share,
                f"sends the candidate {per_round:.1f} requests per round ({c.share:g} x {c.request_rate:g} req/s x "
                f"{c.duration_s:g} s / {c.rounds} rounds), fewer than min_round_requests={c.min_round_requests}, so no round could be judged: "
                f"raise {key}.duration_s to {c.min_round_requests * c.rounds / (c.share * c.request_rate):g} or more, or raise share or request_rate",
            )
