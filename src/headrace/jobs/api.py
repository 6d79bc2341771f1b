"""What every gateway route shares: OpenAI-shaped errors and the bearer-key tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from headrace.jobs.formats import STATUS_OF
from headrace.jobs.store import JobStore
from headrace.schemas.errors import (
    ErrorInfo,
    InputTooLongError,
    InvalidRequestError,
    RequestFailedError,
    UnknownModelError,
)


class ApiError(HTTPException):
    def __init__(self, status: int, message: str, code: str, kind: str = "invalid_request_error"):
        super().__init__(status_code=status, detail=message)
        self.code = code
        self.kind = kind


def tenant_of(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    """The tenant of the request's bearer API key (401 without one or with a wrong one)."""
    if not authorization or not authorization.startswith("Bearer "):
        raise ApiError(401, "no API key: send Authorization: Bearer <key>", "missing_api_key")
    store: JobStore = request.app.state.store
    tenant = store.tenant_of_key(authorization.removeprefix("Bearer ").strip())
    if tenant is None:
        raise ApiError(401, "incorrect API key", "invalid_api_key")
    return tenant


Tenant = Annotated[str, Depends(tenant_of)]


def reply_error(error: ErrorInfo) -> ApiError:
    """The HTTP error for an error reply from the pipeline."""
    status = STATUS_OF[error.code]
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return ApiError(status, error.message, error.code.value, kind)


def api_error(exc: Exception) -> ApiError:
    """The HTTP error for what the SDK raised on a request's way (refused before sending,
    answered with an error, or not answered in time)."""
    if isinstance(exc, UnknownModelError):
        return ApiError(404, str(exc), "model_not_found")
    if isinstance(exc, InputTooLongError):
        return ApiError(400, str(exc), "context_length_exceeded")
    if isinstance(exc, RequestFailedError):
        return reply_error(exc.error)
    if isinstance(exc, TimeoutError):
        return ApiError(504, str(exc) or "no answer in time", "timeout", "server_error")
    if isinstance(exc, InvalidRequestError | ValueError):  # ValueError: parameters refused
        return ApiError(400, str(exc), "invalid_input")
    raise exc
