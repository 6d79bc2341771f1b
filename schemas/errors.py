"""Typed error codes carried in replies and dead-letter records."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class ErrorCode(StrEnum):
    invalid_json = "invalid_json"
    invalid_schema = "invalid_schema"
    empty_input = "empty_input"
    input_too_long = "input_too_long"
    unknown_model = "unknown_model"
    deadline_exceeded = "deadline_exceeded"
    request_too_large = "request_too_large"
    cancelled = "cancelled"
    unavailable = "unavailable"  # the bucket has no live worker or is failing: try later
    overloaded = "overloaded"  # the bucket's backlog is past its bound: try later
    rate_limited = "rate_limited"  # the tenant sends more requests per second than allowed
    quota_exceeded = "quota_exceeded"  # the tenant used its tokens of the quota window
    redelivery_exhausted = "redelivery_exhausted"  # its batch crashed or timed out N times
    model_error = "model_error"
    internal = "internal"
    unauthenticated = "unauthenticated"  # its tenant signs its records; this one was not


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    code: ErrorCode
    message: str
    # when trying again may succeed (overloaded, rate_limited, quota_exceeded)
    retry_after_s: float | None = None


def input_too_long(tokens: int, limit: int) -> ErrorInfo:
    """The one answer to an input past the model's limit (client, dispatcher and worker)."""
    return ErrorInfo(
        code=ErrorCode.input_too_long,
        message=f"{tokens} tokens > model max {limit}; pass truncate=true to cut it",
    )


class HeadraceError(Exception):
    """Root of every error headrace raises to a user.

    HeadraceError
    ├── InvalidRequestError      the request was refused before it was sent
    │   ├── EmptyInputError
    │   ├── InputTooLongError
    │   ├── RequestTooLargeError
    │   └── UnknownModelError
    ├── RequestFailedError       the pipeline answered with a typed error (``.code``)
    ├── ReplyTimeoutError        no reply within the caller's timeout
    ├── BackpressureError        the client's bound on unanswered requests is reached
    ├── LimitedError             refused before sending: try again after ``.retry_after_s``
    │   ├── OverloadedError      the bucket's backlog is past its bound
    │   ├── RateLimitedError     the tenant's requests per second
    │   └── QuotaExceededError   the tenant's tokens per quota window
    └── ModelRegistryError       an operator's model could not be registered, found or loaded
        ├── ModelSourceError     its source cannot be read (no such folder, S3 away, no config)
        ├── ChecksumMismatchError  a file differs from the manifest (``.path`` names it)
        └── VersionConflictError a version exists already, or serves and cannot be removed
    """

    code: ErrorCode = ErrorCode.internal


class InvalidRequestError(HeadraceError, ValueError):
    code = ErrorCode.invalid_schema

    def __init__(self, message: str = "", *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param  # the request field it is about, where one is (an API's 400 names it)


class EmptyInputError(InvalidRequestError):
    code = ErrorCode.empty_input


class InputTooLongError(InvalidRequestError):
    code = ErrorCode.input_too_long


class RequestTooLargeError(InvalidRequestError):
    code = ErrorCode.request_too_large


class UnknownModelError(InvalidRequestError, LookupError):
    code = ErrorCode.unknown_model


class RequestFailedError(HeadraceError):
    def __init__(self, request_id: str, error: ErrorInfo) -> None:
        super().__init__(f"request {request_id} failed: {error.code.value}: {error.message}")
        self.request_id = request_id
        self.code = error.code
        self.error = error


class ReplyTimeoutError(HeadraceError, TimeoutError):
    pass


class BackpressureError(HeadraceError):
    """Too many requests await replies; raised at once or after the configured block timeout."""

    code = ErrorCode.unavailable


class LimitedError(HeadraceError):
    """A bound or a tenant's limit refused the request before it was sent (the dispatcher
    answers the same refusal with an error reply of the same code)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class OverloadedError(LimitedError):
    code = ErrorCode.overloaded


class RateLimitedError(LimitedError):
    code = ErrorCode.rate_limited


class QuotaExceededError(LimitedError):
    code = ErrorCode.quota_exceeded


class ModelRegistryError(HeadraceError):
    """An operator's model could not be registered, found or loaded."""


class ModelSourceError(ModelRegistryError):
    """A model's source cannot be read; the message names the source and what is missing."""


class ChecksumMismatchError(ModelRegistryError):
    """A model file differs from its manifest: ``path`` (relative to the model folder)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class VersionConflictError(ModelRegistryError):
    """A version exists already, or is serving traffic and cannot be removed."""
