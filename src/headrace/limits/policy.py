"""Per-tenant limits and the backlog bound: what is allowed, as pure functions of counts
and the wall clock (no IO; ``headrace.limits.store`` keeps the counts in Redis).

- The request rate is a sliding second, approximated the usual way from two fixed
  one-second windows: ``previous x (1 - elapsed share of this second) + current``.
- The token quota is a fixed window of ``quota_window_s`` (windows start at multiples of it
  in unix time, so every process agrees on them).
- The backlog bound: a bucket's online backlog (records produced, not yet answered).

Every refusal says when trying again may succeed (``retry_after_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.params import SHED_SHARE


@dataclass(frozen=True)
class TenantLimits:
    """0 means no limit. ``weight``: the tenant's share when tenants wait for the same
    workers (fair share inside a bucket and lane; 1 is an equal share, 3 three times it)."""

    requests_per_s: float = 0.0
    tokens_per_window: int = 0
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"weight must be positive, not {self.weight!r}")

    @property
    def limited(self) -> bool:
        return bool(self.requests_per_s or self.tokens_per_window)


@dataclass
class TenantUsage:
    """One tenant's counts: requests per second (by unix second), tokens per quota window
    (by window index)."""

    requests: dict[int, int] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)

    def add(self, other: TenantUsage) -> TenantUsage:
        out = TenantUsage(dict(self.requests), dict(self.tokens))
        for second, n in other.requests.items():
            out.requests[second] = out.requests.get(second, 0) + n
        for window, n in other.tokens.items():
            out.tokens[window] = out.tokens.get(window, 0) + n
        return out


def second_of(wall: float) -> int:
    return math.floor(wall)


def window_of(wall: float, window_s: float) -> int:
    return math.floor(wall / window_s)


def request_rate(usage: TenantUsage, wall: float) -> float:
    """Requests over the sliding second ending at ``wall``."""
    second = second_of(wall)
    elapsed = wall - second
    previous = usage.requests.get(second - 1, 0)
    return previous * (1.0 - elapsed) + usage.requests.get(second, 0)


def refusal(
    limits: TenantLimits,
    usage: TenantUsage,
    wall: float,
    window_s: float,
    tokens: int,
    *,
    count_rate: bool = True,
) -> ErrorInfo | None:
    """Why one more request of ``tokens`` may not go now (None: it may). ``count_rate``:
    False for bulk work, which the request rate does not cover."""
    if count_rate and limits.requests_per_s:
        rate = request_rate(usage, wall)
        if rate + 1 > limits.requests_per_s:
            return ErrorInfo(
                code=ErrorCode.rate_limited,
                message=f"over {limits.requests_per_s:g} requests/s for this tenant",
                retry_after_s=_rate_retry_s(usage, wall, limits.requests_per_s),
            )
    if limits.tokens_per_window:
        window = window_of(wall, window_s)
        used = usage.tokens.get(window, 0)
        if used + tokens > limits.tokens_per_window:
            left = (window + 1) * window_s - wall
            return ErrorInfo(
                code=ErrorCode.quota_exceeded,
                message=(
                    f"{used} of {limits.tokens_per_window} tokens used in this "
                    f"{window_s:g}s quota window; this request needs {tokens}"
                ),
                retry_after_s=round(max(left, 1.0), 1),
            )
    return None


def _rate_retry_s(usage: TenantUsage, wall: float, limit: float) -> float:
    """When the sliding second has room for one more: the previous second's weight falls
    linearly through this one; the current second's counts leave at its end."""
    second = second_of(wall)
    previous = usage.requests.get(second - 1, 0)
    current = usage.requests.get(second, 0)
    if current + 1 <= limit and previous:  # room once enough of the previous has faded
        needed_elapsed = 1.0 - (limit - 1 - current) / previous
        return round(max(needed_elapsed - (wall - second), 0.1), 1)
    return round(max(second + 1 - wall, 0.1), 1)


def overloaded(
    bucket: int, backlog: int, bound: int, drain_s: float, sheddable: bool = False
) -> ErrorInfo:
    """The refusal of an online request to a bucket whose backlog is past its bound (for a
    sheddable one, ``bound`` is already its share); ``drain_s``: how long the workers need
    for the backlog past the bound."""
    why = "the bound for sheddable requests" if sheddable else "bound"
    return ErrorInfo(
        code=ErrorCode.overloaded,
        message=f"bucket {bucket} holds {backlog} unanswered requests ({why} {bound}); "
        "try again later",
        retry_after_s=round(max(drain_s, 1.0), 1),
    )


def shed_bound(bound: int, sheddable: bool) -> int:
    """The backlog past which a request is overloaded: its bucket's bound, or for a
    sheddable request its share of it (refused first)."""
    return max(1, int(bound * SHED_SHARE)) if sheddable else bound
