"""Wire contracts: messages, error codes, topic names and buckets. JSON on the wire."""

from schemas.buckets import DEFAULT_BUCKETS, bucket_for
from schemas.errors import (
    EmptyInputError,
    ErrorCode,
    ErrorInfo,
    HeadraceError,
    InputTooLongError,
    InvalidRequestError,
    ReplyTimeoutError,
    RequestFailedError,
    UnknownModelError,
)
from schemas.messages import (
    SCHEMA_VERSION,
    Batch,
    BatchInfo,
    BatchItem,
    Completion,
    EmbedParams,
    Reply,
    Request,
    Timings,
)
from schemas.topics import Topics

__all__ = [
    "DEFAULT_BUCKETS",
    "SCHEMA_VERSION",
    "Batch",
    "BatchInfo",
    "BatchItem",
    "Completion",
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
    "Timings",
    "Topics",
    "UnknownModelError",
    "bucket_for",
]
