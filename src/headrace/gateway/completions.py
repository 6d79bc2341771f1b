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
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse

from headrace.gateway.api import KeyPriority, Tenant, api_error
from headrace.jobs.openai_answers import generation_body, usage_of, usage_of_all
from headrace.jobs.openai_bodies import (
    ChatCompletionCreate,
    CompletionCreate,
    Sampling,
)
from headrace.jobs.openai_tools import tool_calls_of
from headrace.producers.client import Client
from headrace.schemas.errors import HeadraceError, InvalidRequestError
from headrace.schemas.messages import GenerationResult
from headrace.schemas.params import Priority

WAIT_S = 120.0


def _sse(chunk: dict[str, Any] | str) -> bytes:
    data = chunk if isinstance(chunk, str) else json.dumps(chunk)
    return f"data: {data}\n\n".encode()


# a headrace extension: the semantic cache may answer (docs/cache.md; the tenant opts in too)
Semantic = Annotated[bool, Header(alias="x-headrace-semantic-cache")]


def completions_router(client_for: Callable[[str], Client]) -> APIRouter:
    router = APIRouter()

    async def run(
        tenant: str, prompt: str, body: Sampling, priority: Priority, semantic: bool
    ) -> tuple[str, list[GenerationResult] | AsyncIterator[Indexed]]:
        """The ``n`` choices of ``prompt``: one pipeline request each (ids ``<rid>`` for one
        choice, ``<rid>-<i>`` for several), their results in order, or their events merged
        as they come, each with its choice's index. ``semantic``: the semantic cache may
        answer (the ``X-Headrace-Semantic-Cache`` header)."""
        client = client_for(tenant)
        rid = uuid.uuid4().hex
        rids = [rid] if body.n == 1 else [f"{rid}-{i}" for i in range(body.n)]
        calls = list(zip(rids, body.choice_params(), strict=True))
        streams: list[AsyncIterator[str | GenerationResult]] = []
        try:
            if body.stream:
                for request_id, params in calls:
                    streams.append(
                        client.stream_events(
                            prompt,
                            model=body.model,
                            wait_s=WAIT_S,
                            request_id=request_id,
                            priority=priority,
                            semantic=semantic,
                            **params,
                        )
                    )
                firsts = await _firsts(streams)  # errors before any output surface as HTTP
                return rid, _merged(
                    [_prepend(f, events) for f, events in zip(firsts, streams, strict=True)]
                )
            results = await asyncio.gather(
                *(
                    asyncio.to_thread(
                        client.generate,
                        prompt,
                        model=body.model,
                        wait_s=WAIT_S,
                        request_id=request_id,
                        priority=priority,
                        semantic=semantic,
                        **params,
                    )
                    for request_id, params in calls
                )
            )
            return rid, list(results)
        except (HeadraceError, ValueError, TimeoutError) as exc:
            for events in streams:  # the choices that did start: cancelled, slots freed
                await _close(events)
            raise api_error(exc) from exc

    @router.post("/v1/completions")
    async def completions(
        tenant: Tenant, priority: KeyPriority, body: CompletionCreate, semantic: Semantic = False
    ) -> Any:
        rid, out = await run(tenant, body.prompt(), body, priority, semantic)
        head = {"id": f"cmpl-{rid}", "created": int(time.time()), "model": body.model}
        if isinstance(out, list):
            return generation_body(rid, body.model, out, chat=False)

        def piece(index: int, text: str) -> dict[str, Any]:
            return {"text": text, "index": index, "finish_reason": None}

        def end(index: int, result: GenerationResult) -> list[dict[str, Any]]:
            return [{"text": "", "index": index, "finish_reason": result.finish_reason}]

        chunk = {**head, "object": "text_completion"}
        return _streamed(out, chunk, body, piece, end, [])

    @router.post("/v1/chat/completions")
    async def chat(
        tenant: Tenant,
        priority: KeyPriority,
        body: ChatCompletionCreate,
        semantic: Semantic = False,
    ) -> Any:
        try:
            prompt = body.prompt()
        except InvalidRequestError as exc:
            raise api_error(exc) from exc
        rid, out = await run(tenant, prompt, body, body.priority(priority), semantic)
        head = {"id": f"chatcmpl-{rid}", "created": int(time.time()), "model": body.model}
        if isinstance(out, list):
            return generation_body(rid, body.model, out, chat=True)
        held = HeldCalls(rid, body.n, hold=body.tool_fields().asked())
        chunk = {**head, "object": "chat.completion.chunk"}
        roles = [
            {"index": i, "delta": {"role": "assistant"}, "finish_reason": None}
            for i in range(body.n)
        ]
        return _streamed(out, chunk, body, held.piece, held.end, roles)

    return router


class HeldCalls:
    """A streamed chat's deltas. A choice that may call tools has its text held while it
    may still be a call (empty, or opening with ``<``): text goes out as it comes once it
    cannot be one, and calls go out whole at the choice's end, as one ``tool_calls`` delta
    (OpenAI's shape: each call's id, name and arguments)."""

    def __init__(self, request_id: str, n: int, *, hold: bool) -> None:
        self._rid = request_id
        self._n = n
        self._held: dict[int, str] = {}
        self._passing: set[int] = set() if hold else set(range(n))

    def piece(self, index: int, text: str) -> dict[str, Any] | None:
        if index not in self._passing:
            text = self._held.get(index, "") + text
            if not text or text.startswith("<"):
                self._held[index] = text
                return None
            self._held.pop(index, None)
            self._passing.add(index)
        return {"index": index, "delta": {"content": text}, "finish_reason": None}

    def end(self, index: int, result: GenerationResult) -> list[dict[str, Any]]:
        rid = self._rid if self._n == 1 else f"{self._rid}-{index}"
        calls = tool_calls_of(rid, result)
        held = self._held.pop(index, "")
        out: list[dict[str, Any]] = []
        if calls is not None:
            deltas = [{"index": k, **call} for k, call in enumerate(calls)]
            out.append({"index": index, "delta": {"tool_calls": deltas}, "finish_reason": None})
        elif held:  # a call cut short by max_tokens: the text as it is
            out.append({"index": index, "delta": {"content": held}, "finish_reason": None})
        return [*out, {"index": index, "delta": {}, "finish_reason": result.finish_reason}]


Indexed = tuple[int, str | GenerationResult]
T = TypeVar("T")


def _streamed(
    out: AsyncIterator[Indexed],
    chunk: dict[str, Any],
    body: Sampling,
    piece: Callable[[int, str], dict[str, Any] | None],
    end: Callable[[int, GenerationResult], list[dict[str, Any]]],
    first: list[dict[str, Any]],
) -> StreamingResponse:
    """The SSE response of a streamed completion or chat: ``first`` choices (a chat's roles),
    then one chunk per piece of text (``piece`` shapes it; None: held back) and the chunks
    of each choice's end (``end``: the last has its finish reason, and its usage when there
    is one choice), OpenAI's usage chunk when asked for, and ``[DONE]``."""

    async def events() -> AsyncIterator[bytes]:
        for opening in first:
            yield _sse({**chunk, "choices": [opening]})
        ended: list[GenerationResult] = []
        async for index, event in _closing(out):
            if isinstance(event, str):
                shaped = piece(index, event)
                if shaped is not None:
                    yield _sse({**chunk, "choices": [shaped]})
                continue
            ended.append(event)
            *before, last = end(index, event)
            for choice in before:
                yield _sse({**chunk, "choices": [choice]})
            usage = {"usage": usage_of(event)} if body.n == 1 else {}
            yield _sse({**chunk, "choices": [last], **usage})
        if body.include_usage and ended:  # OpenAI's last chunk: no choices, the usage
            yield _sse({**chunk, "choices": [], "usage": usage_of_all(ended)})
        yield _sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


async def _close(events: AsyncIterator[Any]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


async def _firsts(
    streams: list[AsyncIterator[str | GenerationResult]],
) -> list[str | GenerationResult]:
    """Each stream's first event. If one fails, every stream is closed once all have
    answered (closing one still running would raise) and the first error is raised."""
    got = await asyncio.gather(*(anext(events) for events in streams), return_exceptions=True)
    failed = next((g for g in got if isinstance(g, BaseException)), None)
    if failed is not None:
        for events in streams:
            await _close(events)
        raise failed
    return [g for g in got if not isinstance(g, BaseException)]


async def _merged(streams: list[AsyncIterator[str | GenerationResult]]) -> AsyncIterator[Indexed]:
    """The events of every stream as they come, each with its stream's index; an error in
    one ends them all (the rest are closed: their requests cancelled)."""
    if len(streams) == 1:
        try:
            async for event in streams[0]:
                yield 0, event
        finally:
            await _close(streams[0])
        return
    queue: asyncio.Queue[tuple[int, str | GenerationResult | None, BaseException | None]]
    queue = asyncio.Queue()

    async def pump(index: int, events: AsyncIterator[str | GenerationResult]) -> None:
        try:
            async for event in events:
                await queue.put((index, event, None))
            await queue.put((index, None, None))
        except Exception as exc:  # handed to the reader, who raises it
            await queue.put((index, None, exc))

    tasks = [asyncio.create_task(pump(i, events)) for i, events in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            index, got, error = await queue.get()
            if error is not None:
                raise error
            if got is None:
                left -= 1
                continue
            yield index, got
    finally:
        for task in tasks:  # a reader gone, or an error: the other choices are cancelled
            task.cancel()
        # wait for each pump to end, so that no stream is still running when it is closed
        await asyncio.gather(*tasks, return_exceptions=True)
        for events in streams:
            await _close(events)


async def _closing(events: AsyncIterator[T]) -> AsyncIterator[T]:
    """``events``, closed as soon as this is: a client that disconnects from the stream
    cancels its requests and frees their places (``Client.abandon``) at once, not when the
    garbage collector finds the generator."""
    try:
        async for event in events:
            yield event
    finally:
        await _close(events)


async def _prepend(
    first: str | GenerationResult, rest: AsyncIterator[str | GenerationResult]
) -> AsyncIterator[str | GenerationResult]:
    yield first
    async for event in _closing(rest):
        yield event
