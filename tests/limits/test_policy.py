"""The limits as pure functions: the sliding second, the quota window, when to retry."""

from __future__ import annotations

import pytest

from headrace.limits.policy import (
    TenantLimits,
    TenantUsage,
    overloaded,
    refusal,
    request_rate,
)
from headrace.schemas.errors import ErrorCode

WALL = 1_800_000_000.0  # a whole second, and a whole hour


def test_the_sliding_second_weighs_the_previous_one_by_what_is_left_of_it() -> None:
    usage = TenantUsage(requests={1_799_999_999: 10, 1_800_000_000: 3})
    assert request_rate(usage, WALL) == 13  # at the second's start: all of the previous
    assert request_rate(usage, WALL + 0.25) == pytest.approx(7.5 + 3)
    assert request_rate(usage, WALL + 0.99) == pytest.approx(0.1 + 3)


def test_no_limits_refuse_nothing() -> None:
    busy = TenantUsage(requests={int(WALL): 10**6}, tokens={500_000: 10**9})
    assert refusal(TenantLimits(), busy, WALL, 3600, 10**6) is None


def test_a_rate_limit_refuses_the_request_past_it_and_says_when_to_retry() -> None:
    limits = TenantLimits(requests_per_s=5)
    usage = TenantUsage(requests={int(WALL): 4})
    assert refusal(limits, usage, WALL + 0.5, 3600, 1) is None  # the 5th
    usage.requests[int(WALL)] = 5
    problem = refusal(limits, usage, WALL + 0.5, 3600, 1)
    assert problem is not None and problem.code is ErrorCode.rate_limited
    assert problem.retry_after_s == 0.5  # at the next second, the 5 are gone
    # bulk work is not rate limited
    assert refusal(limits, usage, WALL + 0.5, 3600, 1, count_rate=False) is None


def test_a_rate_retry_waits_until_enough_of_the_previous_second_has_faded() -> None:
    limits = TenantLimits(requests_per_s=4)
    usage = TenantUsage(requests={int(WALL) - 1: 8, int(WALL): 1})
    problem = refusal(limits, usage, WALL + 0.1, 3600, 1)  # 8 x 0.9 + 1 = 8.2 >= 4
    assert problem is not None
    # room when 8 x (1 - e) + 1 + 1 <= 4, e >= 0.75: 0.65 s from now
    assert problem.retry_after_s == pytest.approx(0.6, abs=0.1)
    assert refusal(limits, usage, WALL + 0.76, 3600, 1) is None


def test_a_token_quota_refuses_what_would_pass_it_until_the_window_ends() -> None:
    limits = TenantLimits(tokens_per_window=1000)
    window = int(WALL // 3600)
    usage = TenantUsage(tokens={window: 990})
    assert refusal(limits, usage, WALL + 60, 3600, 10) is None  # exactly at the quota
    problem = refusal(limits, usage, WALL + 60, 3600, 11)
    assert problem is not None and problem.code is ErrorCode.quota_exceeded
    assert problem.retry_after_s == 3540  # the window's end
    assert "990 of 1000" in problem.message
    # the next window starts from nothing
    assert refusal(limits, usage, WALL + 3600, 3600, 11) is None
    # bulk work counts against the quota too
    assert refusal(limits, usage, WALL, 3600, 11, count_rate=False) is not None


def test_usage_adds_up_into_a_new_one() -> None:
    a = TenantUsage(requests={10: 1, 11: 2}, tokens={3: 5})
    b = TenantUsage(requests={11: 1, 12: 1}, tokens={3: 1, 4: 2})
    total = a.add(b)
    assert total.requests == {10: 1, 11: 3, 12: 1} and total.tokens == {3: 6, 4: 2}
    assert a.requests == {10: 1, 11: 2}  # add makes a new one


def test_an_overloaded_refusal_names_the_bucket_and_its_bound() -> None:
    problem = overloaded(64, 1200, 1000, drain_s=0.2)
    assert problem.code is ErrorCode.overloaded
    assert "bucket 64" in problem.message and "1200" in problem.message
    assert problem.retry_after_s == 1.0  # never sooner than a second
    assert overloaded(64, 1200, 1000, drain_s=7.26).retry_after_s == 7.3
