"""What a worker and the dispatcher both check before computing a request (no IO)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from headrace.schemas.errors import ErrorCode
from headrace.workers.admission import admission_error
from tests.schemas.requests import request

NOW = datetime(2026, 12, 7, tzinfo=UTC)
SERVED = {request().model}


@pytest.mark.parametrize("text", ["", " ", "\t\n", "\u00a0\u2003", "   \r\n  "])
def test_an_input_of_nothing_or_only_spaces_is_empty(text: str) -> None:
    error = admission_error(request(input=text), NOW, SERVED, 512)
    assert error is not None and error.code is ErrorCode.empty_input


@pytest.mark.parametrize("text", ["x", " x ", "\u00a0word", "\u200b"])
def test_an_input_with_anything_else_is_admitted(text: str) -> None:
    assert admission_error(request(input=text), NOW, SERVED, 512) is None


def test_token_ids_with_no_text_are_an_input() -> None:
    assert admission_error(request(input="", input_ids=[5, 6]), NOW, SERVED, 512) is None


def test_model_deadline_and_length_are_checked_in_that_order() -> None:
    unknown = admission_error(request(model="other", input=""), NOW, SERVED, 512)
    assert unknown is not None and unknown.code is ErrorCode.unknown_model
    late = request(deadline=(NOW - timedelta(seconds=1)).isoformat())
    error = admission_error(late, NOW, SERVED, 512)
    assert error is not None and error.code is ErrorCode.deadline_exceeded
    error = admission_error(request(), NOW, SERVED, 512, tokens=600)
    assert error is not None and error.code is ErrorCode.input_too_long
