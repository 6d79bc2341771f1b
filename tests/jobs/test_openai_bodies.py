"""OpenAI's request fields on the completion and chat bodies: each served, or accepted only at
the value that asks for nothing and refused otherwise, naming the field; a field OpenAI does
not have is refused. No field is dropped in silence (issue 38 item 1)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from headrace.jobs.openai_answers import generation_body
from headrace.jobs.openai_bodies import (
    MAX_N,
    NOT_SERVED,
    ChatCompletionCreate,
    CompletionCreate,
    Sampling,
)
from headrace.schemas.logprobs import TokenLogprob, TopLogprob
from headrace.schemas.messages import GenerationResult, Usage
from headrace.schemas.params import GenerateParams
from headrace.schemas.response_format import ResponseFormat

CHAT = {"model": "lm", "messages": [{"role": "user", "content": "hi"}]}
PROMPT = {"model": "lm", "prompt": "hi"}

# field: (a value that asks for nothing, one that asks for something not served)
CHAT_FIELDS: dict[str, tuple[Any, Any]] = {
    "top_logprobs": (0, 5),  # without logprobs true
    "response_format": ({"type": "text"}, {"type": "grammar", "grammar": "start: x"}),
    "tools": ([], [{"type": "function", "function": {"name": "two words"}}]),
    "tool_choice": ("none", "auto"),  # auto: with no tools to choose from
    "functions": ([], [{"name": "f"}]),
    "function_call": ("none", "auto"),
    "audio": (None, {"voice": "alloy", "format": "wav"}),
    "modalities": (["text"], ["text", "audio"]),
    "prediction": (None, {"type": "content", "content": "x"}),
    "reasoning_effort": (None, "high"),
    "web_search_options": (None, {}),
    "verbosity": (None, "low"),
    "store": (False, True),
    "service_tier": ("default", "scale"),
}
COMPLETION_FIELDS: dict[str, tuple[Any, Any]] = {
    "best_of": (1, 3),
    "echo": (False, True),
    "suffix": (None, " end"),
    "logprobs": (None, 6),  # OpenAI's bound: 5
}


def refused_field(model: type[Sampling], body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return str(caught.value.errors()[0]["loc"][0])


@pytest.mark.parametrize(
    ("model", "base", "fields"),
    [(ChatCompletionCreate, CHAT, CHAT_FIELDS), (CompletionCreate, PROMPT, COMPLETION_FIELDS)],
)
def test_an_unserved_field_passes_at_its_no_op_value_and_is_refused_by_name_otherwise(
    model: type[Sampling], base: dict[str, Any], fields: dict[str, tuple[Any, Any]]
) -> None:
    for field, (no_op, asks) in fields.items():
        model.model_validate({**base, field: no_op})
        assert refused_field(model, {**base, field: asks}) == field, field
        assert field in NOT_SERVED, field  # its 400 says why


def test_every_explained_field_is_one_a_body_has() -> None:
    declared = set(ChatCompletionCreate.model_fields) | set(CompletionCreate.model_fields)
    assert set(NOT_SERVED) <= declared


def test_a_field_openai_does_not_have_is_refused_and_served_fields_pass() -> None:
    assert refused_field(ChatCompletionCreate, {**CHAT, "temprature": 0}) == "temprature"
    body = ChatCompletionCreate.model_validate(
        {
            **CHAT,
            "max_completion_tokens": 5,
            "seed": 3,
            "stop": ["."],
            "user": "u1",
            "metadata": {"k": "v"},
            "prompt_cache_key": "p",
            "safety_identifier": "s",
            "parallel_tool_calls": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert body.include_usage and body.params()["max_tokens"] == 5


def test_penalties_and_logit_bias_are_served_within_openai_s_ranges() -> None:
    body = CompletionCreate.model_validate(
        {**PROMPT, "presence_penalty": -1.5, "frequency_penalty": 2, "logit_bias": {"50": -100}}
    )
    params = body.params()
    assert (params["presence_penalty"], params["frequency_penalty"]) == (-1.5, 2)
    assert params["logit_bias"] == {"50": -100}
    for field, value in (
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("logit_bias", {"50": 101}),
        ("logit_bias", {"fifty": 1}),
    ):
        assert refused_field(CompletionCreate, {**PROMPT, field: value}) == field


def test_n_choices_count_their_seeds_up_and_are_bounded() -> None:
    seeded = CompletionCreate.model_validate({**PROMPT, "n": 3, "seed": 7, "temperature": 1})
    assert [p["seed"] for p in seeded.choice_params()] == [7, 8, 9]
    unseeded = ChatCompletionCreate.model_validate({**CHAT, "n": 2})
    assert [p["seed"] for p in unseeded.choice_params()] == [None, None]  # each from its id
    assert refused_field(ChatCompletionCreate, {**CHAT, "n": MAX_N + 1}) == "n"
    assert refused_field(ChatCompletionCreate, {**CHAT, "n": 0}) == "n"


def test_stream_options_need_a_stream() -> None:
    assert refused_field(ChatCompletionCreate, {**CHAT, "stream_options": {}}) == "stream_options"
    assert not CompletionCreate.model_validate({**PROMPT, "stream": True}).include_usage


def test_service_tier_picks_the_class_and_auto_or_default_take_the_keys() -> None:
    def tier(value: str | None, key_default: str = "default") -> str:
        body = ChatCompletionCreate.model_validate({**CHAT, "service_tier": value})
        return body.priority(key_default)  # type: ignore[arg-type]

    assert tier("priority") == "interactive"
    assert tier("flex", "interactive") == "sheddable"
    assert [tier(v, "interactive") for v in (None, "auto", "default")] == ["interactive"] * 3
    assert tier(None) == "default"


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_response_format_json_object_and_json_schema_reach_the_pipeline() -> None:
    def wire(fmt: dict[str, Any] | None) -> Any:
        body = {**CHAT, "response_format": fmt} if fmt is not None else CHAT
        return ChatCompletionCreate.model_validate(body).params()["response_format"]

    assert wire(None) is None and wire({"type": "text"}) is None
    assert wire({"type": "json_object"}) == ResponseFormat(type="json_object")
    named = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}
    got = wire(named)
    assert got.type == "json_schema" and json.loads(got.json_schema) == SCHEMA
    GenerateParams(
        **ChatCompletionCreate.model_validate({**CHAT, "response_format": named}).params()
    )


def test_a_schema_that_cannot_be_enforced_is_refused_naming_response_format() -> None:
    for schema in ({"type": "frob"}, {"type": "string", "pattern": "(?<=a)b"}):
        fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
        assert refused_field(ChatCompletionCreate, {**CHAT, "response_format": fmt}) == (
            "response_format"
        )
    nameless = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    assert refused_field(ChatCompletionCreate, {**CHAT, "response_format": nameless}) == (
        "response_format"
    )
    # the legacy completions endpoint has no response_format at all, as OpenAI's
    assert refused_field(
        CompletionCreate, {**PROMPT, "response_format": {"type": "json_object"}}
    ) == ("response_format")


def test_logprobs_reach_the_pipeline_and_are_refused_with_stream() -> None:
    chat = ChatCompletionCreate.model_validate({**CHAT, "logprobs": True, "top_logprobs": 3})
    assert chat.params()["logprobs"] == 3
    assert ChatCompletionCreate.model_validate({**CHAT, "logprobs": True}).params()["logprobs"] == 0
    assert ChatCompletionCreate.model_validate(CHAT).params()["logprobs"] is None
    assert CompletionCreate.model_validate({**PROMPT, "logprobs": 2}).params()["logprobs"] == 2
    streamed = {"stream": True, "logprobs": True}
    assert refused_field(ChatCompletionCreate, {**CHAT, **streamed}) == "logprobs"
    assert refused_field(CompletionCreate, {**PROMPT, "stream": True, "logprobs": 1}) == "logprobs"


def test_logprobs_are_written_in_openai_s_chat_and_completions_shapes() -> None:
    tokens = [
        TokenLogprob(
            token="The",
            logprob=-0.5,
            bytes=[84, 104, 101],
            top_logprobs=[TopLogprob(token="The", logprob=-0.5, bytes=[84, 104, 101])],
        ),
        TokenLogprob(token=" mill", logprob=-1.25, bytes=list(b" mill"), top_logprobs=[]),
    ]
    result = GenerationResult(
        text="The mill",
        finish_reason="stop",
        usage=Usage(prompt_tokens=2, completion_tokens=2),
        logprobs=tokens,
    )
    chat = generation_body("r1", "lm", result, chat=True)["choices"][0]["logprobs"]
    assert chat["content"][0] == {
        "token": "The",
        "logprob": -0.5,
        "bytes": [84, 104, 101],
        "top_logprobs": [{"token": "The", "logprob": -0.5, "bytes": [84, 104, 101]}],
    }
    legacy = generation_body("r1", "lm", result, chat=False)["choices"][0]["logprobs"]
    assert legacy == {
        "tokens": ["The", " mill"],
        "token_logprobs": [-0.5, -1.25],
        "top_logprobs": [{"The": -0.5}, {}],
        "text_offset": [0, 3],
    }
    plain = result.model_copy(update={"logprobs": None})
    assert generation_body("r1", "lm", plain, chat=True)["choices"][0]["logprobs"] is None
