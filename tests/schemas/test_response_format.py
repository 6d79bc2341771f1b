"""Structured output on the wire: a format travels as JSON and back unchanged, keeps the
schema's key order, stays hashable (batch submitters group by parameters), and a schema
llguidance cannot enforce is refused when the message is read."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from headrace.schemas.messages import Request
from headrace.schemas.params import GenerateParams
from headrace.schemas.response_format import ResponseFormat

SCHEMA = {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}


def test_a_format_round_trips_on_the_wire_in_the_schemas_own_order() -> None:
    fmt = ResponseFormat.for_schema(SCHEMA)
    assert list(fmt.schema_object()["properties"]) == ["z", "a"]  # not sorted
    request = Request(
        request_id="r1",
        tenant="acme",
        model="lm",
        input="hi",
        reply_to="t.replies",
        task="generate",
        params=GenerateParams(response_format=fmt),
    )
    again = Request.model_validate_json(request.model_dump_json())
    assert again == request and isinstance(again.params, GenerateParams)
    assert hash(again.params) == hash(request.params)
    assert ResponseFormat(type="json_schema", json_schema=SCHEMA) == fmt  # an object given
    assert ResponseFormat(type="json_object").schema_object() == {"type": "object"}


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"type": "json_schema"}, "json_schema is given with"),
        ({"type": "json_object", "json_schema": "{}"}, "json_schema is given with"),
        ({"type": "tool_calls", "json_schema": "{}"}, "tool_choice is given"),
        ({"type": "json_schema", "json_schema": "{}", "tool_choice": "auto"}, "tool_choice"),
        ({"type": "json_schema", "json_schema": "[1]"}, "not a JSON object"),
        ({"type": "json_schema", "json_schema": {"type": "frob"}}, "cannot be enforced"),
        ({"type": "json_schema", "json_schema": {"pattern": "(?<=a)b"}}, "cannot be enforced"),
        ({"type": "grammar"}, "type"),
    ],
)
def test_what_cannot_be_enforced_is_refused_when_read(given: dict[str, object], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        ResponseFormat.model_validate(given)
    with pytest.raises(ValidationError):
        GenerateParams.model_validate({"response_format": given})
    assert json.dumps(given)  # plain JSON: what a producer would send
