"""Record intake never raises: any bytes become a Request or a typed Rejection."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Request
from headrace.workers.dispatcher.intake import Rejection, parse_request

MAX = 64 * 1024

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)
request_like = st.fixed_dictionaries(
    {},
    optional={
        "schema_version": json_values,
        "request_id": json_values,
        "tenant": json_values,
        "model": json_values,
        "input": json_values,
        "reply_to": json_values,
        "params": json_values,
        "deadline": json_values,
        "surprise": json_values,
    },
)


@given(st.binary(max_size=2048))
def test_random_bytes(raw: bytes) -> None:
    assert isinstance(parse_request(raw, MAX), Request | Rejection)


@given(request_like)
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_wrong_types_and_fields(doc: dict[str, object]) -> None:
    result = parse_request(json.dumps(doc).encode(), MAX)
    if isinstance(result, Rejection):
        assert result.code is ErrorCode.invalid_schema
        assert result.message
        if isinstance(doc.get("reply_to"), str) and isinstance(doc.get("request_id"), str):
            assert (result.reply_to, result.request_id) == (doc["reply_to"], doc["request_id"])
        else:
            assert result.reply_to is None


def test_deep_nesting_is_invalid_not_a_crash() -> None:
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        result = parse_request(raw, 10 * 1024 * 1024)
        assert isinstance(result, Rejection)
        assert result.code in (ErrorCode.invalid_schema, ErrorCode.invalid_json)


def test_huge_record_is_too_large_but_keeps_its_reply_address() -> None:
    raw = json.dumps({"request_id": "r1", "reply_to": "t.replies", "input": "x" * MAX}).encode()
    result = parse_request(raw, MAX)
    assert isinstance(result, Rejection)
    assert result.code is ErrorCode.request_too_large
    assert (result.reply_to, result.request_id) == ("t.replies", "r1")


def test_valid_request_and_invalid_json() -> None:
    request = Request(request_id="r", tenant="t", model="m", input="hi", reply_to="x")
    assert parse_request(request.model_dump_json().encode(), MAX) == request
    bad = parse_request(b'{"request_id": "r", "reply_to": "x"', MAX)
    assert isinstance(bad, Rejection) and bad.code is ErrorCode.invalid_json
    assert bad.reply_to is None  # unreadable: no error reply, only the dead letter
