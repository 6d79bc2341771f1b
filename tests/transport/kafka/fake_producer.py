"""What ``ReliableProducer`` and its diagnostics see of kafka-python's producer, for unit
tests of the delivery policy (the real one is tested against the broker beside them)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

from kafka.errors import IllegalStateError, KafkaTimeoutError
from kafka.structs import TopicPartition

from headrace.transport.base import Record

Log = list[tuple[bytes | None, bytes]]


class FakeFuture:
    def __init__(self, topic: str, offset: int | None, refused: bool = False) -> None:
        self._produce_future = SimpleNamespace(topic_partition=TopicPartition(topic, 0))
        self.is_done = offset is not None or refused
        self.value = SimpleNamespace(topic=topic, partition=0, offset=offset)
        self.exception = RuntimeError("refused") if refused else None
        self._refused = refused

    def succeeded(self) -> bool:
        return self.is_done and not self._refused

    def failed(self) -> bool:
        return self._refused


class FakeProducer:
    """``stuck`` answers nothing and its leader never connects; otherwise each record lands
    at the next offset of one log, but those whose key is in ``refused`` (refused, not
    stored); those whose key is in ``unsure`` are stored but acknowledged without an offset
    (tansu's first answer after a restart)."""

    def __init__(
        self,
        stuck: bool,
        log: Log,
        refused: frozenset[bytes] = frozenset(),
        unsure: frozenset[bytes] = frozenset(),
    ) -> None:
        self.stuck, self.log, self.sent, self.closed = stuck, log, 0, False
        self.refused, self.unsure = refused, unsure
        self.on_send: Callable[[], object] | None = None  # called once, at the next send
        client = SimpleNamespace(
            is_ready=lambda node: not stuck, in_flight_request_count=lambda n: 0
        )
        self._sender = SimpleNamespace(_client=client)
        self._metadata = SimpleNamespace(leader_for_partition=lambda tp: 7)
        self._accumulator = SimpleNamespace(_batches={}, muted=set())

    def send(self, topic: str, key: bytes | None, value: bytes, headers: Any) -> FakeFuture:
        if self.on_send is not None:
            hook, self.on_send = self.on_send, None
            hook()
        if self.closed:
            raise IllegalStateError("KafkaProducer already closed!")  # as kafka-python's
        self.sent += 1
        if self.stuck:
            return FakeFuture(topic, None)
        if key in self.refused:
            return FakeFuture(topic, None, refused=True)
        self.log.append((key, value))
        return FakeFuture(topic, -1 if key in self.unsure else len(self.log) - 1)

    def flush(self, timeout: float) -> None:
        if self.stuck:
            time.sleep(timeout)
            raise KafkaTimeoutError("stuck")

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


def reading(log: Log) -> Any:
    """A read-back of ``log`` as one partition of every topic."""

    def readback(topic: str, partition: int, offset: int | None) -> Iterator[Record]:
        for at, (key, value) in enumerate(log):
            if offset is None or at >= offset:
                yield Record(topic, partition, at, key, value)

    return readback
