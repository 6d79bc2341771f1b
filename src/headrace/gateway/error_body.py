"""An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``. Its own
module so that the body-size middleware, which answers before any route, needs nothing of
the routes' ``api`` module."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi.responses import JSONResponse


def kind_of(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    if status == 429:
        return "requests"
    return "server_error" if status >= 500 else "invalid_request_error"


def error_response(
    status: int,
    message: str,
    code: str | None,
    kind: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    error = {"message": message, "type": kind or kind_of(status), "param": param, "code": code}
    return JSONResponse({"error": error}, status_code=status, headers=dict(headers or {}))
