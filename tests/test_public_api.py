"""The public surface a user imports from ``headrace``."""

from __future__ import annotations

import headrace
from schemas.errors import HeadraceError


def test_exported_names() -> None:
    assert sorted(headrace.__all__) == sorted(
        [
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
    )
    for name in headrace.__all__:
        assert getattr(headrace, name) is not None


def test_every_error_is_a_headrace_error_with_a_code() -> None:
    for name in (
        "EmptyInputError",
        "InputTooLongError",
        "UnknownModelError",
        "InvalidRequestError",
        "ReplyTimeoutError",
        "RequestTooLargeError",
        "BackpressureError",
    ):
        error = getattr(headrace, name)
        assert issubclass(error, HeadraceError)
        assert error.code in headrace.ErrorCode
    assert issubclass(headrace.InputTooLongError, ValueError)  # catchable as ValueError too
