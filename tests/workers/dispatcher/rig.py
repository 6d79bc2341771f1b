"""A dispatcher core driven by hand: records in, actions out, an injected clock. No service."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from headrace.schemas.messages import Completion, RecordRef, Request
from headrace.schemas.params import EmbedParams
from headrace.schemas.topics import Lane, Topics
from headrace.transport.base import Record
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.core import DispatcherCore
from headrace.workers.dispatcher.health import HealthPolicy
from tests.clock import FakeClock

A = TypeVar("A")
WALL = 1_800_000_000.0
TOPICS = Topics("t")
MODEL = "m"


class Rig:
    def __init__(self, **overrides: Any) -> None:
        self.clock = FakeClock()
        self.wall = WALL
        options: dict[str, Any] = {
            "dispatcher_id": "d1",
            "topics": TOPICS,
            "buckets": (16, 32),
            "served": {MODEL: 512},
            "max_batch_tokens": 64,
            "max_wait_ms": 20,
            "max_inflight_batches_per_bucket": 8,
            "lease_base_s": 10,
            "lease_s_per_1k_tokens": 0,
            "commit_interval_ms": 100,
            "max_attempts": 2,
            "health": HealthPolicy(degrade_after_s=5, min_requests=4, cooldown_s=10),
            **overrides,
        }
        self.core = DispatcherCore(
            CoreConfig(**options),
            clock=self.clock,
            wall_clock=lambda: self.wall,
            count_tokens=count_words,
        )
        self.next_offset: dict[str, int] = {}
        self.actions: list[ev.Action] = []  # everything the core has answered so far

    # --- building records ---------------------------------------------------------------------
    def request(
        self,
        request_id: str,
        bucket: int | None = 16,
        tokens: int = 8,
        hint: int | None = None,
        lane: Lane = "online",
        **fields: Any,
    ) -> Record:
        """A request of ``tokens`` tokens (as ``count_words`` counts) on the topic of
        ``bucket`` (None: the unbucketed topic); ``hint``: the token_count it claims."""
        request = Request(
            request_id=request_id,
            tenant=fields.pop("tenant", "acme"),
            model=fields.pop("model", MODEL),
            input=fields.pop("input", " ".join(["word"] * (tokens - 2))),
            params=fields.pop("params", EmbedParams()),
            reply_to="t.replies.default",
            token_count=tokens if hint is None else hint,
            created_at=fields.pop("created_at", datetime.fromtimestamp(self.wall, UTC)),
            **fields,
        )
        return self.raw(request.model_dump_json().encode(), bucket, lane)

    def expired(self, request_id: str) -> Record:
        deadline = datetime.fromtimestamp(self.wall, UTC) - timedelta(seconds=1)
        return self.request(request_id, deadline=deadline)

    def raw(self, value: bytes, bucket: int | None = 16, lane: Lane = "online") -> Record:
        topic = TOPICS.ingress if bucket is None else TOPICS.requests(bucket, lane)
        offset = self.next_offset.get(topic, 0)
        self.next_offset[topic] = offset + 1
        return Record(topic, 0, offset, None, value)

    # --- events ---------------------------------------------------------------------------------
    def handle(self, event: ev.Event) -> list[ev.Action]:
        out = self.core.handle(event)
        self.actions += out
        return out

    def read(self, *records: Record) -> list[ev.Action]:
        polled: dict[tuple[str, int], list[Record]] = {}
        for r in records:
            polled.setdefault(r.tp, []).append(r)
        return self.handle(ev.RecordsRead(polled, self.wall))

    def tick(self, seconds: float = 0.0) -> list[ev.Action]:
        self.clock.now += seconds
        self.wall += seconds
        return self.handle(ev.Tick())

    def workers(
        self, live: dict[int, set[str]] | None = None, runners: dict[str, str | None] | None = None
    ) -> list[ev.Action]:
        live = {16: {"w1"}, 32: {"w1"}} if live is None else live
        seen = ev.WorkersSeen({b: frozenset(w) for b, w in live.items()}, runners or {})
        return self.handle(seen)

    def complete(
        self, send: ev.SendBatch, only: Iterable[str] | None = None, failed: int = 0
    ) -> list[ev.Action]:
        """The worker answered the batch's requests (``only`` these, if given)."""
        done = [i.ref for i in send.batch.items if only is None or i.request.request_id in only]
        completion = Completion(batch_id=send.batch.batch_id, done=done, failed=failed)
        return self.handle(ev.CompletionsRead([completion]))

    def delivered(self, *answers: ev.Answer) -> list[ev.Action]:
        return self.handle(ev.AnswersDelivered([a.ref for a in answers]))


def count_words(texts: Sequence[str]) -> list[int]:
    """The rig's tokenizer: a token per word, plus the two special tokens."""
    return [len(t.split()) + 2 for t in texts]


def of(kind: type[A], actions: Sequence[ev.Action]) -> list[A]:
    return [a for a in actions if isinstance(a, kind)]


def ids(send: ev.SendBatch) -> list[str]:
    return [i.request.request_id for i in send.batch.items]


def ref(record: Record) -> RecordRef:
    return RecordRef(topic=record.topic, partition=record.partition, offset=record.offset)
