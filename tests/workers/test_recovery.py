"""Redelivery policy of a failed batch: split in halves, uncounted when no worker started it,
dead-lettered when one request fails alone ``max_attempts`` times. Real Redis and broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import BatchItem, DeadLetter, RecordRef, Reply, Request
from headrace.schemas.topics import Topics
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka.delivery import ReliableProducer
from headrace.workers.error_replies import ErrorReplies
from headrace.workers.flights import DispatcherStats, Flights, InFlight, Pending, ref_key
from headrace.workers.ledger import Ledger
from headrace.workers.recovery import Recovery
from tests.integration.topics import read_topic

BUCKET = 16


class Rig:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.reply_to = f"{settings.topic_prefix}.replies.test"
        kafka_clients.ensure_topics(settings, [self.topics.dead_letter, self.reply_to])
        self.producer = ReliableProducer(lambda: kafka_clients.producer(settings), timeout_s=10)
        self.ledger = Ledger(connections.redis_client(settings), settings.topic_prefix, 60)
        self.flights = Flights([BUCKET])
        self.errors = ErrorReplies(self.producer, self.ledger, self.topics, owner="dispatcher-t")
        self.stats = DispatcherStats()
        self.recovery = Recovery(
            settings, self.ledger, self.flights, self.errors, self.stats, clock=lambda: 0.0
        )

    def flight(self, count: int) -> InFlight:
        pendings = {}
        for offset in range(count):
            ref = RecordRef(topic=self.topics.requests(BUCKET), partition=0, offset=offset)
            request = Request(
                request_id=f"r{offset}", tenant="t", model="m", input="x", reply_to=self.reply_to
            )
            pending = Pending(BatchItem(request=request, ref=ref, arrived_at=0.0), tokens=4)
            self.flights.owner_of[ref_key(ref)] = pending.key
            self.flights.waiting[pending.key] = [ref]
            self.flights.tracker.track((ref.topic, ref.partition), offset)
            pendings[ref_key(ref)] = pending
        flight = InFlight(bucket=BUCKET, attempt=1, lease_deadline=0.0, pending=pendings)
        self.flights.send_out(uuid.uuid4().hex, flight)
        return flight


@pytest.fixture
def rig(stack: LocalStack) -> Iterator[Rig]:
    rig = Rig(Settings(topic_prefix=f"t-recovery-{uuid.uuid4().hex[:8]}", max_attempts=2))
    yield rig
    rig.producer.close()


def ready_ids(rig: Rig) -> list[list[str]]:
    return [[p.item.request.request_id for p in part] for part in rig.flights.ready[BUCKET]]


def test_a_crashed_batch_is_sent_again_in_halves(rig: Rig) -> None:
    flight = rig.flight(5)
    rig.recovery.redeliver(flight)
    assert sorted(ready_ids(rig)) == [["r0", "r1", "r2"], ["r3", "r4"]]
    assert rig.flights.in_flight_count[BUCKET] == 0
    assert all(p.failures == 1 for part in rig.flights.ready[BUCKET] for p in part)


def test_a_batch_no_worker_started_is_sent_again_whole_and_uncounted(rig: Rig) -> None:
    flight = rig.flight(4)
    rig.recovery.redeliver(flight, counted=False)
    assert ready_ids(rig) == [["r0", "r1", "r2", "r3"]]
    assert all(p.failures == 0 for p in rig.flights.ready[BUCKET][0])


def test_a_request_failing_alone_max_attempts_times_is_dead_lettered(rig: Rig) -> None:
    flight = rig.flight(1)
    rig.recovery.redeliver(flight)  # alone, first failure: sent again
    assert ready_ids(rig) == [["r0"]]
    again = InFlight(bucket=BUCKET, attempt=2, lease_deadline=0.0, pending=dict(flight.pending))
    rig.flights.ready[BUCKET].clear()
    rig.recovery.redeliver(again)  # second failure alone: max_attempts=2 reached
    assert ready_ids(rig) == []
    assert rig.stats.exhausted == 1
    rig.producer.flush()
    replies = [Reply.model_validate_json(r.value) for r in read_topic(rig.settings, rig.reply_to)]
    assert [(r.request_id, r.error and r.error.code) for r in replies] == [
        ("r0", ErrorCode.redelivery_exhausted)
    ]
    letters = read_topic(rig.settings, rig.topics.dead_letter)
    assert [DeadLetter.model_validate_json(r.value).code for r in letters] == [
        ErrorCode.redelivery_exhausted
    ]
