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
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from headrace.gateway.api import Tenant, api_error
from headrace.jobs.openai_bodies import (
    ChatCompletionCreate,
    CompletionCreate,
    Sampling,
    generation_body,
    usage_of,
)
from headrace.producers.client import Client
from headrace.schemas.errors import HeadraceError, InvalidRequestError
from headrace.schemas.messages import GenerationResult

WAIT_S = 120.0


def _sse(chunk: dict[str, Any] | str) -> bytes:
    data = chunk if isinstance(chunk, str) else json.dumps(chunk)
    return f"data: {data}\n\n".encode()


def completions_router(client_for: Callable[[str], Client]) -> APIRouter:
    router = APIRouter()

    async def run(
        tenant: str, prompt: str, body: Sampling
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
        except (HeadraceError, ValueError, TimeoutError) as exc:
            raise api_error(exc) from exc

    @router.post("/v1/completions")
    async def completions(tenant: Tenant, body: CompletionCreate) -> Any:
        rid, out = await run(tenant, body.prompt(), body)
        head = {"id": f"cmpl-{rid}", "created": int(time.time()), "model": body.model}
        if isinstance(out, GenerationResult):
            return generation_body(rid, body.model, out, chat=False)

        async def events() -> AsyncIterator[bytes]:
            async for event in _closing(out):
                chunk = {**head, "object": "text_completion"}
                if isinstance(event, str):
                    choice = {"text": event, "index": 0, "finish_reason": None}
                    yield _sse({**chunk, "choices": [choice]})
                else:
                    choice = {"text": "", "index": 0, "finish_reason": event.finish_reason}
                    yield _sse({**chunk, "choices": [choice], "usage": usage_of(event)})
                    if body.include_usage:
                        yield _sse({**chunk, "choices": [], "usage": usage_of(event)})
            yield _sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    @router.post("/v1/chat/completions")
    async def chat(tenant: Tenant, body: ChatCompletionCreate) -> Any:
        try:
            prompt = body.prompt()
        except InvalidRequestError as exc:
            raise api_error(exc) from exc
        rid, out = await run(tenant, prompt, body)
        head = {"id": f"chatcmpl-{rid}", "created": int(time.time()), "model": body.model}
        if isinstance(out, GenerationResult):
            return generation_body(rid, body.model, out, chat=True)

        async def events() -> AsyncIterator[bytes]:
            chunk = {**head, "object": "chat.completion.chunk"}
            role = {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}
            yield _sse({**chunk, "choices": [role]})
            async for event in _closing(out):
                if isinstance(event, str):
                    piece = {"index": 0, "delta": {"content": event}, "finish_reason": None}
                    yield _sse({**chunk, "choices": [piece]})
                else:
                    end = {"index": 0, "delta": {}, "finish_reason": event.finish_reason}
                    yield _sse({**chunk, "choices": [end], "usage": usage_of(event)})
                    if body.include_usage:  # OpenAI's last chunk: no choices, the usage
                        yield _sse({**chunk, "choices": [], "usage": usage_of(event)})
            yield _sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    return router


async def _closing(
    events: AsyncIterator[str | GenerationResult],
) -> AsyncIterator[str | GenerationResult]:
    """``events``, closed as soon as this is: a client that disconnects from the stream
    cancels its request and frees its place (``Client.abandon``) at once, not when the
    garbage collector finds the generator."""
    try:
        async for event in events:
            yield event
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


async def _prepend(
    first: str | GenerationResult, rest: AsyncIterator[str | GenerationResult]
) -> AsyncIterator[str | GenerationResult]:
    yield first
    async for event in _closing(rest):
        yield event
