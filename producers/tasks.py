"""The client's calls shaped by task: embeddings, rerank scores, labels, each in its inputs'
order (``Client`` has them; they are built on its ``submit_many`` and ``submit``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from headrace.producers.inputs import Given
from headrace.producers.submission import embedding_of, scores_of
from headrace.schemas.messages import Reply

if TYPE_CHECKING:
    from headrace.producers.submission import Submission


class _Client(Protocol):
    def submit_many(self, texts: Sequence[Given], **options: object) -> list[Submission]: ...

    def submit(
        self, text: str, *, request_id: str | None = None, **options: object
    ) -> Submission: ...


class TaskMixin:
    def embed(
        self: _Client, texts: Sequence[Given], *, wait_s: float = 120.0, **options: object
    ) -> list[list[float]]:
        """Embeddings of ``texts`` in order (each a text, or token ids of the model's
        tokenizer embedded as given); raises RequestFailedError on an error reply. (They
        travel as float32 bytes: ``vector_encoding`` base64.)"""
        options.setdefault("vector_encoding", "base64")
        submissions = self.submit_many(texts, **options)
        return [embedding_of(s.result(wait_s)) for s in submissions]

    def rerank(
        self: _Client,
        query: str,
        documents: Sequence[str],
        *,
        wait_s: float = 120.0,
        **options: object,
    ) -> list[float]:
        """Each document's relevance to ``query`` in 0..1, in the documents' order (a
        pipeline serving a ``rerank`` model); RequestFailedError on an error reply."""
        submissions = self.submit_many([query] * len(documents), pairs=documents, **options)
        return [scores_of(s.result(wait_s))["score"] for s in submissions]

    def classify(
        self: _Client, texts: Sequence[str], *, wait_s: float = 120.0, **options: object
    ) -> list[dict[str, float]]:
        """Each text's probability of each label (a pipeline serving a ``classify`` model;
        ``pairs=`` for a pair classifier); RequestFailedError on an error reply."""
        submissions = self.submit_many(texts, **options)
        return [scores_of(s.result(wait_s)) for s in submissions]

    async def aembed(
        self: _Client, texts: Sequence[Given], *, wait_s: float = 120.0, **options: object
    ) -> list[list[float]]:
        options.setdefault("vector_encoding", "base64")
        submissions = await asyncio.to_thread(self.submit_many, texts, **options)
        replies = await asyncio.wait_for(
            asyncio.gather(*(asyncio.wrap_future(s.future) for s in submissions)), wait_s
        )
        return [embedding_of(r) for r in replies]

    async def asubmit(self: _Client, text: str, **options: Any) -> Reply:
        submission = await asyncio.to_thread(self.submit, text, **options)
        return await asyncio.wrap_future(submission.future)
