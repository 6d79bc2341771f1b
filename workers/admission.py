"""Checks a request must pass before it is computed; run at dispatch and again before compute."""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from headrace.schemas.errors import ErrorCode, ErrorInfo, input_too_long
from headrace.schemas.messages import Request


def admission_error(
    request: Request, now: datetime, models: Set[str], max_tokens: int, tokens: int | None = None
) -> ErrorInfo | None:
    """``tokens``: its count if known (the dispatcher counts; else the producer's hint)."""
    if request.model not in models:
        served = ", ".join(sorted(models))
        return ErrorInfo(
            code=ErrorCode.unknown_model,
            message=f"unknown model {request.model!r} (served here: {served})",
        )
    # (isspace: strip would copy every input)
    if (not request.input or request.input.isspace()) and request.input_ids is None:
        return ErrorInfo(code=ErrorCode.empty_input, message="input is empty")
    if request.deadline is not None and request.deadline <= now:
        late_ms = (now - request.deadline).total_seconds() * 1000
        return ErrorInfo(
            code=ErrorCode.deadline_exceeded,
            message=f"deadline passed {late_ms:.0f} ms before compute",
        )
    count = request.token_count if tokens is None else tokens
    if count is not None and count > max_tokens and not request.params.truncate:
        return input_too_long(count, max_tokens)
    return None
