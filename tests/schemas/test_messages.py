from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from schemas.errors import ErrorCode
from schemas.export import export_schemas
from schemas.messages import EmbeddingResult, Reply, Request


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


def test_request_round_trips_as_json_with_schema_version() -> None:
    original = request(token_count=3)
    wire = json.loads(original.model_dump_json())
    assert wire["schema_version"] == 1
    assert Request.model_validate_json(original.model_dump_json()) == original


@pytest.mark.parametrize(
    "bad",
    [
        {"request_id": ""},
        {"request_id": "has space"},
        {"tenant": "x" * 300},
        {"schema_version": 2},
        {"unexpected": 1},
        {"token_count": -1},
        {"deadline": "2026-01-01T00:00:00"},  # naive datetimes are refused
    ],
)
def test_request_rejects_bad_fields(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        request(**bad)


def test_reply_carries_exactly_one_of_result_and_error() -> None:
    with pytest.raises(ValidationError):
        Reply(request_id="r", tenant="t", model="m")
    with pytest.raises(ValidationError):
        Reply(
            request_id="r",
            tenant="t",
            model="m",
            result=EmbeddingResult(embedding=[1.0], token_count=1),
            error={"code": "internal", "message": "x"},  # type: ignore[arg-type]
        )
    failure = Reply.failure("r", "t", "m", ErrorCode.cancelled, "stopped")
    assert failure.error is not None and failure.error.code is ErrorCode.cancelled


def test_exported_json_schema_validates_what_pydantic_accepts(tmp_path: Path) -> None:
    paths = {p.name: p for p in export_schemas(tmp_path)}
    assert set(paths) == {
        "request.v1.json",
        "reply.v1.json",
        "dead-letter.v1.json",
        "invalidation.v1.json",
    }
    schema = json.loads(paths["request.v1.json"].read_text())
    jsonschema.validate(json.loads(request().model_dump_json()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"request_id": "r"}, schema)


def test_an_invalidation_says_what_it_invalidates() -> None:
    from schemas.cache import Invalidation

    assert Invalidation(tenant="acme", tags=["doc:1"]).tags == ["doc:1"]
    assert Invalidation(model="m", model_version="v2").tenant is None
    for bad in (
        {"tags": ["doc:1"]},  # whose tag?
        {"tenant": "acme"},  # nothing to do
        {"model": "m"},  # which version?
        {"tenant": "acme", "keys": ["not-a-sha256"]},
        {"tenant": "acme", "tags": ["has space"]},
    ):
        with pytest.raises(ValidationError):
            Invalidation.model_validate(bad)
