"""headrace: an event-driven, queue-based inference pipeline.

The public surface: ``Client`` to submit and await, ``Settings`` to configure, the wire
messages, and the error hierarchy (see ``headrace.schemas.errors.HeadraceError``).

The names load on first use, so that importing one part (``headrace.workers.backends`` on
a GPU machine, the dispatcher's core) does not load every other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headrace.config.settings import Settings
    from headrace.consumers.replies import stream_replies
    from headrace.producers.client import Client
    from headrace.producers.submission import Submission
    from headrace.schemas.errors import (
        BackpressureError,
        EmptyInputError,
        ErrorCode,
        HeadraceError,
        InputTooLongError,
        InvalidRequestError,
        LimitedError,
        OverloadedError,
        QuotaExceededError,
        RateLimitedError,
        ReplyTimeoutError,
        RequestFailedError,
        RequestTooLargeError,
        UnknownModelError,
    )
    from headrace.schemas.messages import Reply, Request, StreamDelta
    from headrace.schemas.params import GenerateParams
    from headrace.schemas.results import GenerationResult

__version__ = "0.1.0"

_MODULES = {
    "headrace.config.settings": ("Settings",),
    "headrace.consumers.replies": ("stream_replies",),
    "headrace.producers.client": ("Client",),
    "headrace.producers.submission": ("Submission",),
    "headrace.schemas.errors": (
        "BackpressureError",
        "EmptyInputError",
        "ErrorCode",
        "HeadraceError",
        "InputTooLongError",
        "InvalidRequestError",
        "LimitedError",
        "OverloadedError",
        "QuotaExceededError",
        "RateLimitedError",
        "ReplyTimeoutError",
        "RequestFailedError",
        "RequestTooLargeError",
        "UnknownModelError",
    ),
    "headrace.schemas.params": ("GenerateParams",),
    "headrace.schemas.results": ("GenerationResult",),
    "headrace.schemas.messages": (
        "Reply",
        "Request",
        "StreamDelta",
    ),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "BackpressureError",
    "Client",
    "EmptyInputError",
    "ErrorCode",
    "GenerateParams",
    "GenerationResult",
    "HeadraceError",
    "InputTooLongError",
    "InvalidRequestError",
    "LimitedError",
    "OverloadedError",
    "QuotaExceededError",
    "RateLimitedError",
    "Reply",
    "ReplyTimeoutError",
    "Request",
    "RequestFailedError",
    "RequestTooLargeError",
    "Settings",
    "StreamDelta",
    "Submission",
    "UnknownModelError",
    "__version__",
    "stream_replies",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'headrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
