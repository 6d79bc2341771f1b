"""headrace: an event-driven, queue-based inference pipeline.

The public surface: ``Client`` to submit and await, ``Settings`` to configure, the wire
messages, and the error hierarchy (see ``schemas.errors.HeadraceError``).
"""

from consumers.replies import stream_replies
from producers.client import Client, Submission
from runtime.settings import Settings
from schemas.errors import (
    BackpressureError,
    EmptyInputError,
    ErrorCode,
    HeadraceError,
    InputTooLongError,
    InvalidRequestError,
    ReplyTimeoutError,
    RequestFailedError,
    RequestTooLargeError,
    UnknownModelError,
)
from schemas.messages import GenerateParams, GenerationResult, Reply, Request, StreamDelta

__version__ = "0.1.0"

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
