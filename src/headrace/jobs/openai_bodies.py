"""OpenAI's completion and chat-completion request bodies, as the gateway and batch files
read them. A chat's messages become one prompt the way a session's history does
(``sessions.prompt.render_prompt``); the last message must be the user's."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from headrace.schemas.errors import InvalidRequestError
from headrace.schemas.messages import GenerationResult
from headrace.sessions.prompt import render_prompt
from headrace.sessions.store import Turn

COMPLETIONS_URL = "/v1/completions"
CHAT_URL = "/v1/chat/completions"


class Sampling(BaseModel):
    """The sampling fields OpenAI's completion and chat bodies share."""

    model_config = ConfigDict(extra="ignore")  # OpenAI fields not served (n, logprobs...)

    model: str
    max_tokens: int = Field(default=16, ge=1, le=4096)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)  # OpenAI's default
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    user: str | None = None

    def params(self) -> dict[str, Any]:
        """GenerateParams fields."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stop": stop,
            "seed": self.seed,
        }

    def prompt(self) -> str:
        raise NotImplementedError


class CompletionCreate(Sampling):
    prompt_text: str = Field(alias="prompt")

    def prompt(self) -> str:
        return self.prompt_text


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatCompletionCreate(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=4096)

    def prompt(self) -> str:
        *history, last = self.messages
        if last.role != "user":
            raise InvalidRequestError("the last message must be the user's")
        return render_prompt([Turn(role=m.role, content=m.content) for m in history], last.content)

    def params(self) -> dict[str, Any]:
        out = super().params()
        if self.max_completion_tokens is not None:
            out["max_tokens"] = self.max_completion_tokens
        return out


def usage_of(result: GenerationResult) -> dict[str, int]:
    u = result.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def generation_body(
    request_id: str, model: str, result: GenerationResult, *, chat: bool
) -> dict[str, Any]:
    """The response body of a completion (``text_completion``) or a chat completion."""
    head = {"created": int(time.time()), "model": model, "usage": usage_of(result)}
    if chat:
        message = {"role": "assistant", "content": result.text}
        choice = {"index": 0, "message": message, "finish_reason": result.finish_reason}
        return {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            **head,
            "choices": [choice],
        }
    choice = {
        "text": result.text,
        "index": 0,
        "logprobs": None,
        "finish_reason": result.finish_reason,
    }
    return {"id": f"cmpl-{request_id}", "object": "text_completion", **head, "choices": [choice]}
