"""The public surface a user imports from ``headrace``."""

from __future__ import annotations

import subprocess
import sys

import headrace
from headrace.schemas.errors import HeadraceError


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
        "OverloadedError",
        "RateLimitedError",
        "QuotaExceededError",
    ):
        error = getattr(headrace, name)
        assert issubclass(error, HeadraceError)
        assert error.code in headrace.ErrorCode
    assert issubclass(headrace.InputTooLongError, ValueError)  # catchable as ValueError too


def test_every_exported_name_loads_lazily_from_where_it_is_defined() -> None:
    assert set(headrace.__all__) == set(headrace._WHERE) | {"__version__"}
    for name, module in headrace._WHERE.items():
        assert getattr(headrace, name).__module__ == module or name == "ErrorCode"


def test_importing_one_part_loads_neither_the_client_nor_the_services() -> None:
    """The root package loads its names on first use: a GPU script importing a backend, or
    the dispatcher's core, does not pull in the client, Kafka or Redis with it."""
    code = (
        "import sys, headrace.schemas.messages, headrace.workers.dispatcher.batcher\n"
        "loaded = [m for m in ('kafka', 'redis', 'celery', 'headrace.producers.client') "
        "if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_dispatcher_core_loads_no_client_of_any_service() -> None:
    """Every delivery rule runs without IO (the layers contract says so of the imports; this
    says so of what actually loads)."""
    code = (
        "import sys, headrace.workers.dispatcher.core\n"
        "loaded = [m for m in ('kafka', 'redis', 'celery', 'kombu', 'torch', 'boto3') "
        "if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
