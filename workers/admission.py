"""Checks a request must pass before it is computed; run at dispatch and again before compute."""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from headrace.schemas.errors import ErrorCode, ErrorInfo, input_too_long
from headrace.schemas.messages import Request


def admission_error(
    request: Request, now: datetime, models: Set[str], max_tokens: int
) -> ErrorInfo | None:
    if request.model not in models:
        served = ", ".join(sorted(models))
        return ErrorInfo(
            code=ErrorCode.unknown_model,
            message=f"unknown model {request.model!r} (served here: {served})",
        )
    if not request.input.strip():
        return ErrorInfo(code=ErrorCode.empty_input, message="input is empty")
    if request.deadline is not None and request.deadline <= now:
        late_ms = (now - request.deadline).total_seconds() * 1000
        return ErrorInfo(
            code=ErrorCode.deadline_exceeded,
            message=f"deadline passed {late_ms:.0f} ms before compute",
        )
    if (
        request.token_count is not None
        and request.token_count > max_tokens
        and not request.params.truncate
    ):
        return input_too_long(request.token_count, max_tokens)
    return None
