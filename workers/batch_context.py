"""What one batch runs with on a worker (``BatchContext``: the model, the ledger, where replies
go, the hooks around delivery) and where its replies go (``ReplySink``). Its own module: the
helpers of ``batch_runner`` (claims, reply delivery, shadows) read it without importing the
runner back; ``worker`` builds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from headrace.health.tracing import Headers
from headrace.schemas.messages import BatchItem, Reply, StreamDelta
from headrace.sessions.store import SessionStore
from headrace.transport.base import Delivered
from headrace.workers.backends.base import ModelBackend
from headrace.workers.cancel_watch import CancelWatch
from headrace.workers.ledger import Ledger, ReplyAt


class ReplySink(Protocol):
    def track(self, topics: Iterable[str]) -> None:
        """The reply topics a batch will answer on, named when it starts: a broker client
        learns the new ones while the model computes, not one by one as replies go out."""
        ...

    def send(self, topic: str, reply: Reply | StreamDelta, headers: Headers = ()) -> None:
        """``headers``: the request's trace context (``traceparent``)."""
        ...

    def push(self) -> None:
        """The replies sent go to the broker now, without waiting for them (``flush``
        waits)."""
        ...

    def flush(self) -> Sequence[Delivered]:
        """Return once every reply sent is acknowledged by the broker (where each landed);
        raise if one failed."""
        ...

    def missing(self, checks: Sequence[tuple[ReplyAt, str]]) -> list[bool]:
        """For each (where the broker said a reply landed, its request id): is the final
        reply not there (read back)?"""
        ...


@dataclass
class BatchContext:
    backend: ModelBackend
    ledger: Ledger
    sink: ReplySink
    worker_id: str = "worker"
    claim_ms: int = 60_000  # how long a claim outlives a silent owner while computing
    sending_ms: int = 180_000  # ... and while its replies go out (up to the delivery timeout)
    # workers beat this often (None: do not look for dead holders of claims), on these buckets
    heartbeat_s: float | None = None
    buckets: list[int] = field(default_factory=list)
    clock: Callable[[], float] = time.time
    stats: dict[str, float] = field(default_factory=lambda: {"batches": 0, "replies": 0})
    # called with the replies about to be sent (the cache's write-through)
    before_delivery: Callable[[list[tuple[BatchItem, Reply]]], None] | None = None
    sessions: SessionStore | None = None  # conversation histories of generate requests
    # called with the batch's bucket and its replies once they are acknowledged (metrics)
    after_delivery: Callable[[int, list[tuple[BatchItem, Reply]]], None] | None = None
    model_version: str | None = None  # the version this worker serves (stamped on replies)
    # called with the replies of requests a shadow version computes too (after delivery)
    shadowed: Callable[[list[tuple[BatchItem, Reply]]], None] | None = None
    # held while a batch encodes and computes: batches of one worker take turns at the model
    # (a lock where a worker holds several batches of a model that computes one at a time)
    model_turn: AbstractContextManager[object] = field(default_factory=nullcontext)
    # one look at Redis for every running generation's cancellations (None: each batch asks)
    cancels: CancelWatch | None = None
    # where an encoder's first attempt at a batch claims its requests while it computes them
    # (the claim's round trip off a lone request's path); None: claim, then compute
    claim_beside: Executor | None = None
    # called once a batch's last replies are on their way to the broker (pushed), while it
    # acknowledges them and before the ledger hears of them: the worker is done with the
    # model (the hand-off desk says it is idle then, so a requester answered by them finds
    # it so; before the push, that Redis round trip delayed every reply, and after the
    # acknowledgement a requester could read its reply and send the next request first)
    replies_sent: Callable[[], None] | None = None
