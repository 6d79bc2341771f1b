"""Generation requests of the SDK: ``generate`` and the streams, mixed into ``Client``.

A generate request travels like an embedding one (prepared, bucketed by prompt length,
answered once); a stream also watches the reply topic for its StreamDelta records and
reassembles them in order, each once (``consumers/streams.py``).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from headrace.consumers.streams import DeltaAssembler
from headrace.schemas.errors import ReplyTimeoutError, RequestFailedError
from headrace.schemas.messages import GenerationResult, Reply, Request, StreamDelta
from headrace.schemas.params import GenerateParams, Priority

if TYPE_CHECKING:
    from headrace.consumers.replies import ReplyListener
    from headrace.producers.submission import Submission


class _Client(Protocol):
    """What the mixin uses of ``Client``."""

    tenant: str
    _listener: ReplyListener | None

    def prepare(
        self,
        texts: Sequence[str],
        *,
        model: str | None = ...,
        request_ids: Sequence[str] | None = ...,
        generation: GenerateParams | None = ...,
        session_id: str | None = ...,
        priority: Priority = ...,
        semantic: bool = ...,
    ) -> list[tuple[Request, int]]: ...

    def send(self, request: Request, bucket: int, *, semantic: bool = ...) -> Submission: ...

    def flush(self) -> None: ...

    def abandon(self, request_ids: Sequence[str]) -> None: ...

    def _submit_generation(
        self,
        prompt: str,
        model: str | None,
        request_id: str | None,
        params: GenerateParams,
        session_id: str | None = None,
        priority: Priority = "default",
        semantic: bool = False,
    ) -> Submission: ...

    def stream_events(
        self, prompt: str, **options: Any
    ) -> AsyncIterator[str | GenerationResult]: ...


class GenerationMixin:
    """``Client``'s generation methods (typed against what they use of it, ``_Client``)."""

    def generate(
        self: _Client,
        prompt: str,
        *,
        model: str | None = None,
        wait_s: float = 120.0,
        request_id: str | None = None,
        session_id: str | None = None,
        priority: Priority = "default",
        semantic: bool = False,
        **params: Any,
    ) -> GenerationResult:
        """Generate from ``prompt`` (GenerateParams fields as keywords: max_tokens,
        temperature, top_p, stop, seed, truncate); raises RequestFailedError on an error.
        ``session_id``: a turn of that conversation (its history comes first).
        ``semantic``: the answer to a near prompt may serve (docs/cache.md; the tenant must
        be in ``cache_semantic_tenants``)."""
        submission = self._submit_generation(
            prompt, model, request_id, GenerateParams(**params), session_id, priority, semantic
        )
        try:
            reply = submission.result(wait_s)
        except ReplyTimeoutError:
            self.abandon([submission.request.request_id])
            raise
        return _generation(reply)

    def submit_generation(
        self: _Client,
        prompt: str,
        *,
        model: str | None = None,
        request_id: str | None = None,
        session_id: str | None = None,
        priority: Priority = "default",
        semantic: bool = False,
        **params: Any,
    ) -> Submission:
        """Send a generate request without waiting: ``.result(timeout_s)`` is its Reply
        (``.future`` a concurrent Future of it). Options as ``generate``."""
        return self._submit_generation(
            prompt, model, request_id, GenerateParams(**params), session_id, priority, semantic
        )

    async def stream(self: _Client, prompt: str, **options: Any) -> AsyncIterator[str]:
        """``async for text in client.stream(prompt, max_tokens=...)``: the generated text
        in order, each piece once, as the worker decodes it (options as ``stream_events``).
        Raises RequestFailedError if the request fails (after any text already given)."""
        async for event in self.stream_events(prompt, **options):
            if isinstance(event, str):
                yield event

    async def stream_events(
        self: _Client,
        prompt: str,
        *,
        model: str | None = None,
        wait_s: float = 120.0,
        request_id: str | None = None,
        session_id: str | None = None,
        priority: Priority = "default",
        semantic: bool = False,
        **params: Any,
    ) -> AsyncIterator[str | GenerationResult]:
        """As ``stream``, then the final GenerationResult (finish reason, usage) last.
        (``semantic``: as ``generate``; an answer from the cache comes as one piece.)"""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StreamDelta | Reply] = asyncio.Queue()
        generation = GenerateParams(**{**params, "stream": True})
        rid = request_id or uuid.uuid4().hex
        if self._listener is None:
            raise RuntimeError("this client does not listen for replies")

        def on_delta(delta: StreamDelta) -> None:  # on the listener's thread
            loop.call_soon_threadsafe(queue.put_nowait, delta)

        self._listener.watch(self.tenant, rid, on_delta)
        gone = Gone(lambda: self.abandon([rid]))

        def submit() -> Submission:
            submission = self._submit_generation(
                prompt, model, rid, generation, session_id, priority, semantic
            )
            gone.submitted()  # abandoned here if the reader left while this ran
            return submission

        assembler = DeltaAssembler()
        deadline = loop.time() + wait_s
        answered = False
        try:
            submission = await asyncio.to_thread(submit)
            submission.future.add_done_callback(
                lambda f: loop.call_soon_threadsafe(queue.put_nowait, f.result())
            )
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError as exc:
                    raise ReplyTimeoutError(f"no reply for {rid} within {wait_s}s") from exc
                if isinstance(item, StreamDelta):
                    for piece in assembler.add(item):
                        yield piece
                    continue
                answered = True
                result = _generation(item)  # raises on an error reply
                rest = assembler.finish(item)
                if rest:
                    yield rest
                yield result
                return
        finally:
            if not answered and gone.left():  # timed out, or the reader went away
                loop.run_in_executor(None, self.abandon, [rid])

    def _submit_generation(
        self: _Client,
        prompt: str,
        model: str | None,
        request_id: str | None,
        params: GenerateParams,
        session_id: str | None = None,
        priority: Priority = "default",
        semantic: bool = False,
    ) -> Submission:
        ids = [request_id] if request_id is not None else None
        [(request, bucket)] = self.prepare(
            [prompt],
            model=model,
            request_ids=ids,
            generation=params,
            session_id=session_id,
            priority=priority,
            semantic=semantic,
        )
        submission = self.send(request, bucket, semantic=semantic)
        self.flush()
        return submission


class Gone:
    """A stream's request abandoned exactly once when its reader leaves: at once if it was
    submitted, else by the submitting thread as soon as it is (a reader that leaves while
    its request is still being produced would otherwise leave it awaited forever, holding
    a place under ``client_max_pending``)."""

    def __init__(self, abandon: Callable[[], None]) -> None:
        self._abandon = abandon
        self._lock = threading.Lock()
        self._submitted = self._left = False

    def submitted(self) -> None:
        """The request is out (on the submitting thread): abandoned now if the reader left."""
        with self._lock:
            self._submitted = True
            left = self._left
        if left:
            self._abandon()

    def left(self) -> bool:
        """The reader left: whether the caller abandons it now (it was submitted)."""
        with self._lock:
            self._left = True
            return self._submitted


def _generation(reply: Reply) -> GenerationResult:
    if reply.error is not None:
        raise RequestFailedError(reply.request_id, reply.error)
    assert isinstance(reply.result, GenerationResult)
    return reply.result
