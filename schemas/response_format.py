"""Structured output on the wire: ``ResponseFormat``, what a generation must be (JSON, JSON
valid against a schema, or tool calls: ``schemas.tool_calls``), and the grammar it compiles
to.

The grammar is llguidance's (a fast Rust library for constrained decoding: a token mask per
step in tens of microseconds, with wide JSON Schema coverage; docs/dependencies.md says why
it over xgrammar and outlines-core). A schema is checked when the message is read, so a
schema llguidance cannot enforce is a typed error for that request, at the gateway or the
dispatcher, never a failure inside a worker's decode loop. JSON comes out with OpenAI's
spacing (``", "`` and ``": "``, no other whitespace): a small model cannot pad it forever.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from headrace.schemas.tool_calls import CLOSE, OPEN, ToolChoice

MAX_SCHEMA_CHARS = 32_768
# compact JSON, spaced as OpenAI's models write it
if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

JSON_OPTIONS: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
ANY_OBJECT = json.dumps({"type": "object"})


class ResponseFormat(BaseModel):
    """``json_object``: the text is one JSON object. ``json_schema``: the text is JSON valid
    against ``json_schema`` (the schema itself, as JSON text: the message stays hashable).
    Enforced token by token; a row that runs out of ``max_tokens`` first ends ``length``
    with the JSON unfinished, as OpenAI's does. ``tool_calls``: the text is tool calls, each
    valid against ``json_schema`` (one call's schema, ``tool_calls.call_schema``), one or
    more of them as ``parallel_tool_calls`` says; ``tool_choice`` ``auto`` lets the model
    answer text instead."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["json_object", "json_schema", "tool_calls"]
    json_schema: str | None = Field(default=None, max_length=MAX_SCHEMA_CHARS)
    tool_choice: ToolChoice | None = None  # with tool_calls, and only then
    parallel_tool_calls: bool = True

    @field_validator("json_schema", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        """A schema given as an object travels as its JSON text, keys in the order given
        (properties are generated in the schema's order, as OpenAI's are)."""
        if isinstance(value, dict):
            return json.dumps(value, separators=(",", ":"))
        return value

    @model_validator(mode="after")
    def _enforceable(self) -> ResponseFormat:
        if (self.type == "json_object") == (self.json_schema is not None):
            raise ValueError("json_schema is given with type json_schema or tool_calls")
        if (self.type == "tool_calls") != (self.tool_choice is not None):
            raise ValueError("tool_choice is given with type tool_calls, and only then")
        problem = grammar_problem(self.grammar())
        if problem:
            raise ValueError(f"the schema cannot be enforced: {problem}")
        return self

    @classmethod
    def for_schema(cls, schema: dict[str, Any]) -> ResponseFormat:
        """``json_schema`` for ``schema`` (an object)."""
        return cls(type="json_schema", json_schema=json.dumps(schema, separators=(",", ":")))

    def schema_object(self) -> dict[str, Any]:
        """The JSON Schema the text must satisfy (``json_object``: any object)."""
        return dict(json.loads(self.json_schema or ANY_OBJECT))

    def grammar(self) -> str:
        """llguidance's grammar for it (compiled once per schema in a process)."""
        if self.tool_choice is not None:
            assert self.json_schema is not None  # checked when read
            return tools_grammar(self.json_schema, self.tool_choice, self.parallel_tool_calls)
        return compiled(self.json_schema or ANY_OBJECT)


@lru_cache(maxsize=256)
def compiled(schema_text: str) -> str:
    """The grammar of a JSON Schema given as text. A request's schema is read at the
    gateway, the dispatcher and the worker, and the worker compiles it for each row: each
    process compiles a schema once."""
    from llguidance import LLMatcher

    try:
        return LLMatcher.grammar_from_json_schema(schema_text, defaults=JSON_OPTIONS)
    except ValueError as exc:  # not a JSON object
        raise ValueError(f"the schema is not a JSON object: {exc}") from exc


@lru_cache(maxsize=256)
def grammar_problem(grammar: str) -> str:
    """Why llguidance cannot enforce ``grammar`` ("" when it can)."""
    from llguidance import LLMatcher

    return str(LLMatcher.validate_grammar(grammar))


@lru_cache(maxsize=256)
def tools_grammar(schema_text: str, choice: ToolChoice, parallel: bool) -> str:
    """The Lark grammar of a generation that calls tools: one call (or, ``parallel``, one
    or more) of ``schema_text``'s JSON; with ``auto``, a text not opening with ``<`` is the
    other way out."""
    schema = {**json.loads(schema_text), "x-guidance": JSON_OPTIONS}
    calls = "call+" if parallel else "call"
    start = f"start: {calls}" if choice == "required" else f"start: {calls} | TEXT"
    return "\n".join(
        [
            "%llguidance {}",
            start,
            f'call: "{OPEN}" %json {json.dumps(schema)} "{CLOSE}"',
            r"TEXT: /[^<][\s\S]*/",
        ]
    )
