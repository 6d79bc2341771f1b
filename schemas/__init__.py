"""Wire contracts: messages, error codes, topic names and buckets. JSON on the wire."""

from schemas.buckets import DEFAULT_BUCKETS, bucket_for
from schemas.errors import (
    BackpressureError,
    EmptyInputError,
    ErrorCode,
    ErrorInfo,
    HeadraceError,
    InputTooLongError,
    InvalidRequestError,
    ReplyTimeoutError,
    RequestFailedError,
    RequestTooLargeError,
    UnknownModelError,
)
from schemas.messages import (
    SCHEMA_VERSION,
    Batch,
    BatchInfo,
    BatchItem,
    Completion,
    Control,
    EmbedParams,
    Reply,
    Request,
    Timings,
)
from schemas.topics import Topics

__all__ = [
    "DEFAULT_BUCKETS",
    "SCHEMA_VERSION",
    "BackpressureError",
    "Batch",
    "BatchInfo",
    "BatchItem",
    "Completion",
    "Control",
    "EmbedParams",
    "EmptyInputError",
    "ErrorCode",
    "ErrorInfo",
    "HeadraceError",
    "InputTooLongError",
    "InvalidRequestError",
    "Reply",
    "ReplyTimeoutError",
    "Request",
    "RequestFailedError",
    "RequestTooLargeError",
    "Timings",
    "Topics",
    "UnknownModelError",
    "bucket_for",
]
