"""What every gateway route shares: errors in OpenAI's shape, a request id on every response,
and the bearer-key tenant.

Every error, whatever raised it (a route, FastAPI's body validation, an unknown path, a bug),
leaves as ``{"error": {"message", "type", "param", "code"}}`` with OpenAI's status: 400 for
an invalid request (never FastAPI's 422), 401, 404, 409, 429, 5xx. Every response carries an
``x-request-id`` header (the caller's, when it sent one; the SDKs read it as ``_request_id``).
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from headrace.gateway.body_limit import BodyLimitMiddleware
from headrace.gateway.error_body import error_response, kind_of
from headrace.gateway.http_observability import ObservabilityMiddleware
from headrace.jobs.formats import STATUS_OF
from headrace.jobs.openai_bodies import explain
from headrace.jobs.store import JobStore
from headrace.schemas.errors import (
    BackpressureError,
    ErrorCode,
    ErrorInfo,
    InputTooLongError,
    InvalidRequestError,
    LimitedError,
    RequestFailedError,
    UnknownModelError,
)
from headrace.schemas.params import Priority

log = logging.getLogger(__name__)

REQUEST_ID = "x-request-id"
_CALLER_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class ApiError(HTTPException):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        kind: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status_code=status, detail=message, headers=dict(headers or {}))
        self.code = code
        self.kind = kind or kind_of(status)
        self.param = param


_STARLETTE_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def _validation_error(exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 as OpenAI's 400: the first problem, with the parameter it names."""
    problems = exc.errors()
    first = problems[0] if problems else {}
    where = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    param = ".".join(where) or None
    kind = first.get("type")
    message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if kind == "extra_forbidden":  # OpenAI's words for a field it does not have
        message = f"Unrecognized request argument supplied: {param}"
    elif param:
        message = f"{param}: {message}{explain(where[0])}"
    code = "missing_required_parameter" if kind == "missing" else "invalid_value"
    return error_response(400, message, code, param=param)


def install(app: FastAPI, max_body_bytes: int, max_file_bytes: int) -> None:
    """Errors in OpenAI's shape, the request id and the body-size limits, on every route of
    ``app``."""

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc, ApiError):
            return error_response(
                exc.status_code, exc.detail, exc.code, exc.kind, exc.param, exc.headers
            )
        code = _STARLETTE_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, str(exc.detail), code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error(exc)

    # before anything reads the body, authentication included
    app.add_middleware(
        BodyLimitMiddleware, max_body_bytes=max_body_bytes, max_file_bytes=max_file_bytes
    )
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(ObservabilityMiddleware)  # outermost: it sees the status sent


class RequestIdMiddleware:
    """Puts ``x-request-id`` on every response: the caller's id when it is a sane token,
    else a new ``req_<hex>``. A bug in a route is answered 500 in OpenAI's shape (and
    logged), not with a bare text body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(REQUEST_ID.encode(), b"").decode("latin-1")
        request_id = given if _CALLER_ID.fullmatch(given) else f"req_{uuid.uuid4().hex}"

        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers: list[Any] = list(message.get("headers", []))
                headers.append((REQUEST_ID.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if started:
                raise
            failed = error_response(500, "the server had an error processing the request", None)
            await failed(scope, receive, send_with_id)


def tenant_of(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    """The tenant of the request's bearer API key (401 without one or with a wrong one)."""
    if not authorization or not authorization.startswith("Bearer "):
        raise ApiError(401, "no API key: send Authorization: Bearer <key>", "missing_api_key")
    store: JobStore = request.app.state.store
    owner = store.key_owner(authorization.removeprefix("Bearer ").strip())
    if owner is None:
        raise ApiError(401, "incorrect API key", "invalid_api_key")
    request.state.priority = owner.priority  # the class of requests that name none
    return owner.tenant


Tenant = Annotated[str, Depends(tenant_of)]


def key_priority(request: Request, _: Tenant) -> Priority:
    """The class the request's API key gives requests that name none (FastAPI runs
    ``tenant_of`` once per request, before this)."""
    priority: Priority = request.state.priority
    return priority


KeyPriority = Annotated[Priority, Depends(key_priority)]


# a refusal by a bound or a tenant's limit: 429 with OpenAI's (code, type) and Retry-After
_LIMITED = {
    ErrorCode.overloaded: ("overloaded", "requests"),
    ErrorCode.rate_limited: ("rate_limit_exceeded", "requests"),
    ErrorCode.quota_exceeded: ("insufficient_quota", "insufficient_quota"),
}


def limited(code: ErrorCode, message: str, retry_after_s: float | None) -> ApiError:
    name, kind = _LIMITED[code]
    retry = {"retry-after": str(max(1, math.ceil(retry_after_s or 1)))}
    return ApiError(429, message, name, kind, headers=retry)


def reply_error(error: ErrorInfo) -> ApiError:
    """The HTTP error for an error reply from the pipeline."""
    if error.code in _LIMITED:
        return limited(error.code, error.message, error.retry_after_s)
    return ApiError(STATUS_OF[error.code], error.message, error.code.value)


def api_error(exc: Exception) -> ApiError:
    """The HTTP error for what the SDK raised on a request's way (refused before sending,
    answered with an error, or not answered in time)."""
    if isinstance(exc, UnknownModelError):
        return ApiError(404, str(exc), "model_not_found", param="model")
    if isinstance(exc, InputTooLongError):
        return ApiError(400, str(exc), "context_length_exceeded", param="input")
    if isinstance(exc, RequestFailedError):
        return reply_error(exc.error)
    if isinstance(exc, LimitedError):
        return limited(exc.code, str(exc), exc.retry_after_s)
    if isinstance(exc, BackpressureError):
        return ApiError(429, str(exc), "rate_limit_exceeded")
    if isinstance(exc, TimeoutError):
        return ApiError(504, str(exc) or "no answer in time", "timeout")
    if isinstance(exc, InvalidRequestError):
        return ApiError(400, str(exc), "invalid_input", param=exc.param)
    if isinstance(exc, ValueError):  # parameters refused
        return ApiError(400, str(exc), "invalid_input")
    raise exc
