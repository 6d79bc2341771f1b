"""``Submission``: a request as it was produced, with the future of its reply."""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from headrace.schemas.errors import ReplyTimeoutError, RequestFailedError
from headrace.schemas.messages import EmbeddingResult, Reply, Request, ScoreResult


@dataclass(frozen=True)
class Submission:
    request: Request
    bucket: int
    future: Future[Reply]

    def result(self, timeout_s: float | None = None) -> Reply:
        try:
            return self.future.result(timeout=timeout_s)
        except FutureTimeout as exc:
            raise ReplyTimeoutError(
                f"no reply for {self.request.request_id} within {timeout_s}s"
            ) from exc


def embedding_of(reply: Reply) -> list[float]:
    """The reply's embedding; RequestFailedError if it is an error reply."""
    if reply.error is not None:
        raise RequestFailedError(reply.request_id, reply.error)
    assert isinstance(reply.result, EmbeddingResult)
    return reply.result.vector()


def scores_of(reply: Reply) -> dict[str, float]:
    """The reply's scores by label (a reranker's one is ``score``); RequestFailedError if it
    is an error reply."""
    if reply.error is not None:
        raise RequestFailedError(reply.request_id, reply.error)
    assert isinstance(reply.result, ScoreResult)
    return dict(zip(reply.result.labels, reply.result.scores, strict=True))
