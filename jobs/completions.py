"""OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions`` through the pipeline,
with SSE streaming (``"stream": true``: ``data: <chunk>`` events, then ``data: [DONE]``).

A chat's messages become one prompt the way a session's history does
(``sessions.prompt.render_prompt``); the last message must be the user's.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from jobs.api import ApiError, Tenant
from jobs.formats import STATUS_OF
from producers.client import Client
from schemas.errors import (
    InputTooLongError,
    InvalidRequestError,
    ReplyTimeoutError,
    RequestFailedError,
    UnknownModelError,
)
from schemas.messages import GenerationResult
from sessions.prompt import render_prompt
from sessions.store import Turn

WAIT_S = 120.0


class _Sampling(BaseModel):
    model: str
    max_tokens: int = Field(default=16, ge=1, le=4096)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)  # OpenAI's default
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    user: str | None = None

    def params(self) -> dict[str, Any]:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stop": stop,
            "seed": self.seed,
        }


class CompletionCreate(_Sampling):
    prompt: str


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatCompletionCreate(_Sampling):
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


def _usage(result: GenerationResult) -> dict[str, int]:
    u = result.usage
    total = u.prompt_tokens + u.completion_tokens
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": total,
    }


def _sse(chunk: dict[str, Any] | str) -> bytes:
    data = chunk if isinstance(chunk, str) else json.dumps(chunk)
    return f"data: {data}\n\n".encode()


def completions_router(client_for: Callable[[str], Client]) -> APIRouter:
    router = APIRouter()

    async def run(
        tenant: str, prompt: str, body: _Sampling
    ) -> tuple[str, GenerationResult | AsyncIterator[str | GenerationResult]]:
        client = client_for(tenant)
        rid = uuid.uuid4().hex
        try:
            if body.stream:
                events = client.stream_events(
                    prompt, model=body.model, wait_s=WAIT_S, request_id=rid, **body.params()
                )
                first = await anext(events)  # errors before any output surface as HTTP
                return rid, _prepend(first, events)
            result = await asyncio.to_thread(
                client.generate,
                prompt,
                model=body.model,
                wait_s=WAIT_S,
                request_id=rid,
                **body.params(),
            )
            return rid, result
        except UnknownModelError as exc:
            raise ApiError(404, str(exc), "model_not_found") from exc
        except InputTooLongError as exc:
            raise ApiError(400, str(exc), "context_length_exceeded") from exc
        except InvalidRequestError as exc:
            raise ApiError(400, str(exc), "invalid_input") from exc
        except ValueError as exc:  # GenerateParams refused a value
            raise ApiError(400, str(exc), "invalid_input") from exc
        except ReplyTimeoutError as exc:
            raise ApiError(504, str(exc), "timeout", "server_error") from exc
        except RequestFailedError as exc:
            status = STATUS_OF[exc.code]
            kind = "server_error" if status >= 500 else "invalid_request_error"
            raise ApiError(status, exc.error.message, exc.code.value, kind) from exc

    @router.post("/v1/completions")
    async def completions(tenant: Tenant, body: CompletionCreate) -> Any:
        rid, out = await run(tenant, body.prompt, body)
        head = {"id": f"cmpl-{rid}", "created": int(time.time()), "model": body.model}
        if isinstance(out, GenerationResult):
            choice = {"text": out.text, "index": 0, "finish_reason": out.finish_reason}
            choice["logprobs"] = None
            return {**head, "object": "text_completion", "choices": [choice], "usage": _usage(out)}

        async def events() -> AsyncIterator[bytes]:
            async for event in out:
                chunk = {**head, "object": "text_completion"}
                if isinstance(event, str):
                    choice = {"text": event, "index": 0, "finish_reason": None}
                    yield _sse({**chunk, "choices": [choice]})
                else:
                    choice = {"text": "", "index": 0, "finish_reason": event.finish_reason}
                    yield _sse({**chunk, "choices": [choice], "usage": _usage(event)})
            yield _sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    @router.post("/v1/chat/completions")
    async def chat(tenant: Tenant, body: ChatCompletionCreate) -> Any:
        try:
            prompt = body.prompt()
        except InvalidRequestError as exc:
            raise ApiError(400, str(exc), "invalid_input") from exc
        rid, out = await run(tenant, prompt, body)
        head = {"id": f"chatcmpl-{rid}", "created": int(time.time()), "model": body.model}
        if isinstance(out, GenerationResult):
            message = {"role": "assistant", "content": out.text}
            choice = {"index": 0, "message": message, "finish_reason": out.finish_reason}
            return {**head, "object": "chat.completion", "choices": [choice], "usage": _usage(out)}

        async def events() -> AsyncIterator[bytes]:
            chunk = {**head, "object": "chat.completion.chunk"}
            role = {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}
            yield _sse({**chunk, "choices": [role]})
            async for event in out:
                if isinstance(event, str):
                    piece = {"index": 0, "delta": {"content": event}, "finish_reason": None}
                    yield _sse({**chunk, "choices": [piece]})
                else:
                    end = {"index": 0, "delta": {}, "finish_reason": event.finish_reason}
                    yield _sse({**chunk, "choices": [end], "usage": _usage(event)})
            yield _sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    return router


async def _prepend(
    first: str | GenerationResult, rest: AsyncIterator[str | GenerationResult]
) -> AsyncIterator[str | GenerationResult]:
    yield first
    async for event in rest:
        yield event
