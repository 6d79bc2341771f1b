"""A valid request for tests, with the fields a test cares about given."""

from __future__ import annotations

from headrace.schemas.messages import Request


def request(**overrides: object) -> Request:
    fields: dict[str, object] = {
        "request_id": "r-1",
        "tenant": "acme",
        "model": "all-MiniLM-L6-v2",
        "input": "hello",
        "reply_to": "headrace.replies.default",
    }
    fields.update(overrides)
    return Request.model_validate(fields)
