"""One HTTP call as many pipeline requests: submitted together, their replies awaited
together, and, if the call fails or its client goes away, the ones still out cancelled (their
client slots freed). Embeddings, rerank and classify calls go through it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from headrace.gateway.api import api_error, reply_error
from headrace.producers.client import Client
from headrace.schemas.errors import HeadraceError
from headrace.schemas.results import Result

WAIT_S = 120.0


async def results_of(client: Client, texts: Sequence[Any], **options: Any) -> list[Result]:
    """The result of each text's request, in order; an error reply or a refusal raises the
    call's HTTP error."""
    submissions = []
    try:
        submissions = await asyncio.to_thread(client.submit_many, texts, **options)
        replies = await asyncio.wait_for(
            asyncio.gather(*(asyncio.wrap_future(s.future) for s in submissions)), WAIT_S
        )
    except (HeadraceError, TimeoutError, asyncio.CancelledError) as exc:
        ids = [s.request.request_id for s in submissions if not s.future.done()]
        if ids:
            await asyncio.to_thread(client.abandon, ids)
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise api_error(exc) from exc
    results: list[Result] = []
    for reply in replies:
        if reply.error is not None:
            raise reply_error(reply.error)
        assert reply.result is not None
        results.append(reply.result)
    return results
