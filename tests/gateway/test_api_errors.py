"""How the gateway answers a refusal by a bound or a tenant's limit: 429 in OpenAI's shape,
with Retry-After in whole seconds (at least 1), whether the SDK refused it before producing
or the dispatcher answered it with an error reply."""

from __future__ import annotations

import pytest

from headrace.gateway.api import api_error, reply_error
from headrace.schemas.errors import (
    ErrorCode,
    ErrorInfo,
    LimitedError,
    OverloadedError,
    QuotaExceededError,
    RateLimitedError,
)


@pytest.mark.parametrize(
    ("error", "code", "kind", "retry"),
    [
        (OverloadedError("bucket 16 holds 9000", 2.5), "overloaded", "requests", "3"),
        (RateLimitedError("over 5 requests/s", 0.2), "rate_limit_exceeded", "requests", "1"),
        (
            QuotaExceededError("tokens used", 3540),
            "insufficient_quota",
            "insufficient_quota",
            "3540",
        ),
    ],
)
def test_a_refusal_before_producing_is_429_with_retry_after(
    error: LimitedError, code: str, kind: str, retry: str
) -> None:
    http = api_error(error)
    assert (http.status_code, http.code, http.kind) == (429, code, kind)
    assert http.headers == {"retry-after": retry}


def test_the_same_refusal_as_an_error_reply_reads_the_same() -> None:
    reply = ErrorInfo(code=ErrorCode.overloaded, message="bucket 16 holds 9000", retry_after_s=7.2)
    http = reply_error(reply)
    assert (http.status_code, http.code, http.headers) == (429, "overloaded", {"retry-after": "8"})
    other = reply_error(ErrorInfo(code=ErrorCode.unavailable, message="no worker"))
    assert other.status_code == 503 and not other.headers  # no Retry-After for the rest
