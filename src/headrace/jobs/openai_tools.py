"""OpenAI's tools in chat bodies: ``tools`` (functions with a JSON Schema of parameters),
``tool_choice`` (``none``, ``auto``, ``required`` or one named function),
``parallel_tool_calls``, and the messages a tool conversation adds (an assistant's
``tool_calls``, each ``tool`` result). Built on structured output: the calls are generated
under a grammar (``schemas.tool_calls``), so each is a declared function with arguments
valid against its schema; the answer's ``tool_calls`` are read back from that text.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from headrace.schemas.messages import GenerationResult
from headrace.schemas.response_format import ResponseFormat
from headrace.schemas.tool_calls import call_schema, read_calls, write_call

MAX_TOOLS = 128  # OpenAI's limit


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None  # JSON Schema; none: no arguments
    strict: bool | None = None  # the arguments are enforced token by token either way

    def parameters_problem(self) -> str | None:
        """Why its arguments could not be enforced (None: they can)."""
        if self.parameters is None:
            return None
        if self.parameters.get("type") != "object":
            return 'parameters is a JSON Schema of "type": "object"'
        try:
            ResponseFormat.for_schema(self.parameters)
        except ValueError as exc:
            first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            return f"parameters cannot be enforced: {first.removeprefix('Value error, ')}"
        return None


class ToolDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionDef


class FunctionName(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionName


ToolChoiceField = Literal["none", "auto", "required"] | NamedToolChoice


class CalledFunction(BaseModel):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCallIn(BaseModel):
    """A call an assistant made earlier in the conversation."""

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction

    def written(self) -> str:
        try:
            arguments = json.loads(self.function.arguments or "{}")
        except ValueError as exc:
            raise ValueError(f"tool call {self.id}: arguments are not JSON: {exc}") from exc
        return write_call(self.function.name, arguments)


class ChatMessage(BaseModel):
    """A message of a chat: ``system``, ``developer`` (read as system), ``user``,
    ``assistant`` (its text, or the tools it called), or ``tool`` (a call's result)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # assistant
    tool_call_id: str | None = None  # tool

    @model_validator(mode="after")
    def _well_formed(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("tool_calls are an assistant's")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message has tool_call_id, and only a tool message")
        if self.content is None and not self.tool_calls:
            raise ValueError(f"a {self.role} message needs content")
        return self

    def line(self) -> tuple[str, str]:
        """The message as a transcript line (role, text)."""
        role = "system" if self.role == "developer" else self.role
        calls = "".join(c.written() for c in self.tool_calls or [])
        return role, (self.content or "") + calls


class Tools(BaseModel):
    """The tool fields of a chat body, read apart from the rest of it."""

    tools: list[ToolDef] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoiceField | None = None
    parallel_tool_calls: bool | None = None

    def choice(self) -> Literal["none", "auto", "required"] | NamedToolChoice:
        """OpenAI's default: ``auto`` with tools, ``none`` without."""
        if self.tool_choice is not None:
            return self.tool_choice
        return "auto" if self.tools else "none"

    def choice_problem(self) -> str | None:
        """Why ``tool_choice`` does not fit ``tools`` (None: it does)."""
        names = [t.function.name for t in self.tools or []]
        choice = self.choice()
        if choice != "none" and not names:
            return "there are no tools to choose from"
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            return f"there is no function {choice.function.name!r} in tools"
        return None

    def asked(self) -> bool:
        """Whether the answer may be tool calls."""
        return self.choice() != "none"

    def line(self) -> tuple[str, str] | None:
        """The functions as the transcript's ``tools:`` line (none: no line)."""
        if not self.tools:
            return None
        listed = [t.function.model_dump(exclude_none=True, exclude={"strict"}) for t in self.tools]
        return "tools", json.dumps(listed, separators=(", ", ": "))

    def response_format(self) -> ResponseFormat | None:
        """The grammar the answer is generated under (None: tools not asked for)."""
        choice = self.choice()
        if choice == "none" or not self.tools:
            return None
        functions = [(t.function.name, t.function.parameters) for t in self.tools]
        if isinstance(choice, NamedToolChoice):
            functions = [f for f in functions if f[0] == choice.function.name]
        try:
            return ResponseFormat(
                type="tool_calls",
                json_schema=json.dumps(call_schema(functions), separators=(",", ":")),
                tool_choice="auto" if choice == "auto" else "required",
                parallel_tool_calls=self.parallel_tool_calls is not False
                and not isinstance(choice, NamedToolChoice),
            )
        except ValueError as exc:
            raise ValueError(f"a function's parameters cannot be enforced: {exc}") from exc


def tool_calls_of(request_id: str, result: GenerationResult) -> list[dict[str, Any]] | None:
    """The answer's ``tool_calls`` in OpenAI's shape (None: it called none). Call ids are
    the request's, numbered: a rerun of the request names its calls the same."""
    if result.finish_reason != "tool_calls":
        return None
    calls = read_calls(result.text) or []
    return [
        {
            "id": f"call_{request_id}_{k}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }
        for k, c in enumerate(calls)
    ]
