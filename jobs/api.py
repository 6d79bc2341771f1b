"""What every gateway route shares: OpenAI-shaped errors and the bearer-key tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from jobs.store import JobStore


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
