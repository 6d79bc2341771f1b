"""Tool calls as generated text: how a call is written, the schema every call is generated
under, and how a finished text is read back as calls.

A call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, the format of
headrace's chat transcript (``sessions.prompt``), and a generation that calls tools is one
or more of them and nothing else. Its grammar (``schemas.response_format.tools_grammar``)
is llguidance's Lark with each call's JSON embedded (``%json``): the arguments are valid
against the tool's ``parameters`` schema token by token, as structured output's are. With
``tool_choice`` ``auto`` the model may answer text instead, which then must not open with
``<``, so a text is never half a call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
ToolChoice = Literal["auto", "required"]
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


def call_schema(functions: list[tuple[str, dict[str, Any] | None]]) -> dict[str, Any]:
    """The JSON Schema of one call of any of ``functions`` ((name, parameters schema)
    pairs; no parameters: an empty object)."""
    each = [
        {
            "type": "object",
            "properties": {
                "name": {"const": name},
                "arguments": parameters if parameters is not None else NO_PARAMETERS,
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name, parameters in functions
    ]
    return each[0] if len(each) == 1 else {"anyOf": each}


def write_call(name: str, arguments: dict[str, Any]) -> str:
    """A call as the model writes it (an assistant's earlier calls in a transcript)."""
    body = json.dumps({"name": name, "arguments": arguments}, separators=(", ", ": "))
    return f"{OPEN}{body}{CLOSE}"


def read_calls(text: str) -> list[ToolCall] | None:
    """The calls ``text`` is made of, in order; None if it is not one or more whole calls
    (a text answer, or a generation cut short by ``max_tokens``)."""
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    at = 0
    while at < len(text):
        if not text.startswith(OPEN, at):
            return None
        try:
            body, end = decoder.raw_decode(text, at + len(OPEN))
        except ValueError:
            return None
        if not text.startswith(CLOSE, end) or not isinstance(body, dict):
            return None
        name, arguments = body.get("name"), body.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return None
        calls.append(ToolCall(name, arguments))
        at = end + len(CLOSE)
    return calls or None
