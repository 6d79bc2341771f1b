"""Turning a request record's bytes into a Request, or into a typed reason it is not one.

Pure functions: whatever the bytes (random, huge, deeply nested, wrong types), the result is a
Request or a Rejection; nothing else escapes. A rejection carries what an error reply needs
when the record names a reply topic and a request id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Request


@dataclass(frozen=True)
class Rejection:
    code: ErrorCode
    message: str
    reply_to: str | None = None
    request_id: str | None = None
    tenant: str = ""
    model: str = ""


def parse_request(raw: bytes, max_bytes: int) -> Request | Rejection:
    if len(raw) > max_bytes:
        return _rejection(
            raw, ErrorCode.request_too_large, f"{len(raw)} bytes > max_request_bytes {max_bytes}"
        )
    try:
        return Request.model_validate_json(raw)
    except ValidationError as exc:
        reasons = exc.errors(include_url=False, include_input=False)
        message = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in reasons[:5]
        )
        code = ErrorCode.invalid_json if _json_object(raw) is None else ErrorCode.invalid_schema
        return _rejection(raw, code, message)


def _rejection(raw: bytes, code: ErrorCode, message: str) -> Rejection:
    parsed = _json_object(raw) or {}
    reply_to, request_id = parsed.get("reply_to"), parsed.get("request_id")
    readable = isinstance(reply_to, str) and isinstance(request_id, str)
    return Rejection(
        code=code,
        message=message,
        reply_to=reply_to if readable else None,
        request_id=request_id if readable else None,
        tenant=str(parsed.get("tenant", ""))[:200],
        model=str(parsed.get("model", ""))[:200],
    )


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """The record as a JSON object; None if it is not JSON. (Valid JSON that is not an
    object counts as an empty object: it is JSON, but of the wrong schema.)"""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return None
    return parsed if isinstance(parsed, dict) else {}


def request_key(raw: bytes) -> tuple[str, str] | None:
    """(tenant, request_id) of a request record, read without validating the rest (None if
    it names none)."""
    parsed = _json_object(raw) or {}
    tenant, request_id = parsed.get("tenant"), parsed.get("request_id")
    if isinstance(tenant, str) and isinstance(request_id, str):
        return (tenant, request_id)
    return None
