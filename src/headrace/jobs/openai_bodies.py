"""OpenAI's completion and chat-completion request bodies, as the gateway and batch files
read them. A chat's messages become one prompt the way a session's history does
(``sessions.prompt.render_prompt``); the last message must be the user's.

No field is dropped in silence (issue 38): each of OpenAI's request fields is either served,
or accepted only at the value that asks for nothing (``n`` 1, ``logprobs`` false, ``tools``
empty, ...), any other value a 400 naming the field (``NOT_SERVED`` says why); a field
OpenAI does not have is a 400 too. docs/gateway.md has the table.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from headrace.jobs.openai_tools import (
    MAX_TOOLS,
    ChatMessage,
    ToolChoiceField,
    ToolDef,
    Tools,
)
from headrace.schemas.errors import InvalidRequestError
from headrace.schemas.logprobs import MAX_TOP_LOGPROBS
from headrace.schemas.params import Priority
from headrace.schemas.response_format import ResponseFormat
from headrace.sessions.prompt import transcript

COMPLETIONS_URL = "/v1/completions"
CHAT_URL = "/v1/chat/completions"


MAX_N = 16  # choices of one call

# Why a field is served only at its value that asks for nothing: added to its 400's message.
NOT_SERVED = {
    "best_of": "leave best_of out or 1",
    "echo": "the prompt is not echoed: leave echo out or false",
    "suffix": "insertion is not served: leave suffix out",
    "logprobs": "0 to 5 alternatives on /v1/completions, true or false on chat; not with stream",
    "top_logprobs": "0 to 20, with logprobs true",
    "response_format": '{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
    '"json_schema": {"name": ..., "schema": {...}}}',
    "tools": "functions, each with a JSON Schema of its parameters",
    "tool_choice": '"none", "auto", "required" or {"type": "function", "function": {"name"}} '
    "naming one of tools; not with a response_format",
    "functions": "the deprecated form of tools: use tools",
    "function_call": 'the deprecated form of tool_choice: use tool_choice (or "none")',
    "audio": "audio output is not served",
    "modalities": 'text is the only output: leave modalities out or ["text"]',
    "prediction": "predicted outputs are not served",
    "reasoning_effort": "no served model reasons: leave reasoning_effort out",
    "web_search_options": "web search is not served",
    "verbosity": "leave verbosity out",
    "store": "completions are not stored: leave store out or false",
    "service_tier": '"auto", "default" (the API key\'s class), "priority" (interactive) or '
    '"flex" (sheddable)',
}


TIERS: dict[str, Priority] = {"priority": "interactive", "flex": "sheddable"}


def explain(field: str) -> str:
    """What ``NOT_SERVED`` says of ``field``, or nothing."""
    why = NOT_SERVED.get(field)
    return f" ({why})" if why else ""


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_object"]


class JsonSchemaSpec(BaseModel):
    """OpenAI's ``json_schema``: a name, the schema, and ``strict`` (the schema is enforced
    token by token either way)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec

    @field_validator("json_schema")
    @classmethod
    def _enforceable(cls, value: JsonSchemaSpec) -> JsonSchemaSpec:
        ResponseFormat.for_schema(value.schema_)  # ValueError: a 400
        return value


ResponseFormats = Annotated[
    TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")
]


def wire_format(
    given: TextFormat | JsonObjectFormat | JsonSchemaFormat | None,
) -> ResponseFormat | None:
    """A chat body's ``response_format`` as the pipeline's (None: plain text)."""
    if isinstance(given, JsonSchemaFormat):
        return ResponseFormat.for_schema(given.json_schema.schema_)
    if isinstance(given, JsonObjectFormat):
        return ResponseFormat(type="json_object")
    return None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class Sampling(BaseModel):
    """The fields OpenAI's completion and chat bodies share; a field OpenAI does not have
    is refused (``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int = Field(default=16, ge=1, le=4096)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)  # OpenAI's default
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: (
        dict[
            Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}$")],
            Annotated[float, Field(ge=-100.0, le=100.0)],
        ]
        | None
    ) = Field(default=None, max_length=300)
    n: int = Field(default=1, ge=1, le=MAX_N)  # choices: one pipeline request each
    # accepted only at the value that asks for nothing (NOT_SERVED says why)

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(
        cls, value: StreamOptions | None, info: ValidationInfo
    ) -> StreamOptions | None:
        if value is not None and not info.data.get("stream"):
            raise ValueError("only with stream true")
        return value

    @property
    def include_usage(self) -> bool:
        """A stream ends with a chunk of its usage alone (``stream_options.include_usage``)."""
        return self.stream_options is not None and self.stream_options.include_usage

    def params(self) -> dict[str, Any]:
        """GenerateParams fields."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stop": stop,
            "seed": self.seed,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "logit_bias": self.logit_bias or {},
        }

    def choice_params(self) -> list[dict[str, Any]]:
        """``params`` for each of the ``n`` choices: a given ``seed`` counts up from choice
        to choice (else each is seeded from its own request id), so the choices differ
        unless decoding is greedy."""
        base = self.params()
        if self.seed is None:
            return [base] * self.n
        return [{**base, "seed": (self.seed + i) % 2**63} for i in range(self.n)]

    def prompt(self) -> str:
        raise NotImplementedError


def not_streamed(value: Any, info: ValidationInfo) -> Any:
    """Log probabilities come with the whole answer: refused with ``stream``."""
    if value not in (None, False) and info.data.get("stream"):
        raise ValueError("log probabilities are not streamed: leave them out with stream")
    return value


class CompletionCreate(Sampling):
    prompt_text: str = Field(alias="prompt")
    best_of: Literal[1] | None = None
    echo: Literal[False] | None = None
    suffix: None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)  # alternatives per token

    _logprobs_not_streamed = field_validator("logprobs")(not_streamed)

    def prompt(self) -> str:
        return self.prompt_text

    def params(self) -> dict[str, Any]:
        return super().params() | {"logprobs": self.logprobs}


class ChatCompletionCreate(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=4096)
    # accepted, no effect on the output
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormats | None = None  # served: structured output
    tools: list[ToolDef] | None = Field(default=None, max_length=MAX_TOOLS)  # served: calls
    tool_choice: ToolChoiceField | None = Field(default=None, validate_default=True)
    parallel_tool_calls: bool | None = None
    # accepted only at the value that asks for nothing (NOT_SERVED says why)
    functions: list[dict[str, Any]] | None = Field(default=None, max_length=0)
    function_call: Literal["none"] | None = None
    audio: None = None
    modalities: list[Literal["text"]] | None = None
    prediction: None = None
    reasoning_effort: None = None
    web_search_options: None = None
    verbosity: None = None
    store: Literal[False] | None = None
    service_tier: Literal["auto", "default", "priority", "flex"] | None = None

    _logprobs_not_streamed = field_validator("logprobs")(not_streamed)

    @field_validator("top_logprobs")
    @classmethod
    def _top_needs_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise ValueError("only with logprobs true")
        return value

    @field_validator("tools")
    @classmethod
    def _tools_fit(cls, value: list[ToolDef] | None) -> list[ToolDef] | None:
        names = [t.function.name for t in value or []]
        if len(set(names)) != len(names):
            raise ValueError("each function has a name of its own")
        for tool in value or []:
            problem = tool.function.parameters_problem()
            if problem:
                raise ValueError(f"function {tool.function.name!r}: {problem}")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _choice_fits(cls, value: Any, info: ValidationInfo) -> Any:
        tools = Tools(tools=info.data.get("tools"), tool_choice=value)
        problem = tools.choice_problem()
        if problem:
            raise ValueError(problem)
        fmt = info.data.get("response_format")
        if tools.asked() and fmt is not None and not isinstance(fmt, TextFormat):
            raise ValueError("not with a response_format (tool_choice none: the format)")
        return value

    def tool_fields(self) -> Tools:
        return Tools(
            tools=self.tools,
            tool_choice=self.tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
        )

    def priority(self, key_default: Priority) -> Priority:
        """The request's class: ``service_tier`` "priority" is ``interactive`` and "flex"
        ``sheddable`` (refused first under overload, as OpenAI's flex tier may be); "auto",
        "default" or none: the API key's class."""
        return TIERS.get(self.service_tier or "auto", key_default)

    def prompt(self) -> str:
        """The transcript: the tools (if any), each message, then the assistant's turn."""
        if self.messages[-1].role not in ("user", "tool"):
            raise InvalidRequestError("the last message must be the user's or a tool's")
        tools = self.tool_fields().line()
        try:
            lines = [m.line() for m in self.messages]
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
        return transcript([tools, *lines] if tools else lines)

    def params(self) -> dict[str, Any]:
        out = super().params()
        if self.max_completion_tokens is not None:
            out["max_tokens"] = self.max_completion_tokens
        out["response_format"] = self.tool_fields().response_format() or wire_format(
            self.response_format
        )
        out["logprobs"] = (self.top_logprobs or 0) if self.logprobs else None
        return out
