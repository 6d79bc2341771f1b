"""OpenAI's tool fields on chat bodies: what reaches the pipeline (the grammar of the calls
``tool_choice`` allows), what is refused and by which field, how a tool conversation is
written into the transcript, and how calls come back in OpenAI's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from headrace.jobs.openai_answers import generation_body
from headrace.jobs.openai_bodies import ChatCompletionCreate
from headrace.schemas.messages import GenerationResult, Usage
from headrace.schemas.params import GenerateParams
from headrace.schemas.tool_calls import read_calls, write_call

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "strict": True,
    },
}
CLOCK = {"type": "function", "function": {"name": "now"}}  # no parameters
CHAT = {"model": "lm", "messages": [{"role": "user", "content": "weather in Oslo?"}]}


def body(**fields: Any) -> ChatCompletionCreate:
    return ChatCompletionCreate.model_validate({**CHAT, "tools": [WEATHER, CLOCK], **fields})


def refusal(**fields: Any) -> tuple[str, str]:
    with pytest.raises(ValidationError) as caught:
        body(**fields)
    error = caught.value.errors()[0]
    return str(error["loc"][0]), str(error["msg"])


def test_tool_choice_picks_the_grammar_that_reaches_the_pipeline() -> None:
    auto = GenerateParams(**body().params()).response_format  # OpenAI's default with tools
    assert auto is not None and auto.type == "tool_calls" and auto.tool_choice == "auto"
    assert auto.parallel_tool_calls
    names = {s["properties"]["name"]["const"] for s in json.loads(auto.json_schema or "")["anyOf"]}
    assert names == {"get_weather", "now"}
    required = body(tool_choice="required", parallel_tool_calls=False).params()
    assert required["response_format"].tool_choice == "required"
    assert not required["response_format"].parallel_tool_calls
    named = body(tool_choice={"type": "function", "function": {"name": "now"}}).params()
    only = json.loads(named["response_format"].json_schema)
    assert only["properties"]["name"] == {"const": "now"}  # that function and no other
    assert named["response_format"].tool_choice == "required"
    assert body(tool_choice="none").params()["response_format"] is None  # tools listed, no calls


def test_tool_fields_that_do_not_fit_are_refused_by_name() -> None:
    assert refusal(tool_choice={"type": "function", "function": {"name": "gone"}})[0] == (
        "tool_choice"
    )
    assert refusal(tools=[WEATHER, WEATHER])[0] == "tools"  # a name twice
    frob = {"type": "object", "properties": {"x": {"type": "frob"}}}
    bad = {"type": "function", "function": {"name": "f", "parameters": frob}}
    field, why = refusal(tools=[bad])
    assert field == "tools" and "'f'" in why and "cannot be enforced" in why
    field, why = refusal(tools=[{**CLOCK, "function": {"name": "g", "parameters": {}}}])
    assert field == "tools" and '"type": "object"' in why
    field, why = refusal(response_format={"type": "json_object"})  # and tool_choice auto
    assert field == "tool_choice" and "response_format" in why
    body(tool_choice="none", response_format={"type": "json_object"})  # no calls: a format


def test_a_tool_conversation_is_written_into_the_transcript() -> None:
    asked = body(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "4 C, rain"},
        ]
    )
    lines = asked.prompt().split("\n")
    assert lines[0].startswith("tools: ") and json.loads(lines[0][7:])[0]["name"] == "get_weather"
    assert lines[1:] == [
        "system: Be brief.",
        "user: weather in Oslo?",
        "assistant: " + write_call("get_weather", {"city": "Oslo"}),
        "tool: 4 C, rain",
        "assistant:",
    ]
    no_tools = ChatCompletionCreate.model_validate(CHAT)
    assert no_tools.prompt() == "user: weather in Oslo?\nassistant:"  # as before tools


def test_messages_that_break_the_tool_rules_are_refused() -> None:
    with pytest.raises(ValidationError):  # a tool result without the call it answers
        body(messages=[{"role": "tool", "content": "4 C"}])
    with pytest.raises(ValidationError):  # only an assistant calls tools
        body(messages=[{"role": "user", "content": "x", "tool_calls": []}, CHAT["messages"][0]])
    ended_by_assistant = body(messages=[*CHAT["messages"], {"role": "assistant", "content": "x"}])
    with pytest.raises(ValueError, match="the user's or a tool's"):
        ended_by_assistant.prompt()


def test_calls_come_back_in_openai_s_shape_and_text_as_content() -> None:
    text = write_call("get_weather", {"city": "Oslo"}) + write_call("now", {})
    assert [c.name for c in read_calls(text) or []] == ["get_weather", "now"]
    usage = Usage(prompt_tokens=9, completion_tokens=20)
    called = GenerationResult(text=text, finish_reason="tool_calls", usage=usage)
    message = generation_body("r1", "lm", called, chat=True)["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": "call_r1_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        },
        {"id": "call_r1_1", "type": "function", "function": {"name": "now", "arguments": "{}"}},
    ]
    answered = GenerationResult(text="Rain.", finish_reason="stop", usage=usage)
    plain = generation_body("r2", "lm", answered, chat=True)["choices"][0]
    assert plain["message"] == {"role": "assistant", "content": "Rain."}
    assert plain["finish_reason"] == "stop"
