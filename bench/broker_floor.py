"""The broker's share of a lone request's latency: one hop measured with the bare client.

A lone request crosses the broker twice: the client's request to the dispatcher (which
reads every bucket topic of both lanes) and the worker's reply to the client (one reply
topic). Each hop here is kafka-python alone, with the pipeline's own producer and consumer
settings (linger, acks, the eager fetch wait): the time from the producer's ``send`` to the
consumer's ``poll`` returning the record, for records sent one at a time. Whatever the
pipeline's latency has beyond two such hops is its own (Python, Redis, Celery).
"""

from __future__ import annotations

import threading
import time
import uuid

from kafka import KafkaConsumer

from headrace.config.settings import Settings
from headrace.transport.kafka import clients

WARM_S = 0.02  # a hop's consumer polls from this long before its record is sent


class Hop:
    """One hop kept open: ``once()`` sends a record to the first of ``topics`` new topics,
    read by a group member subscribed to all of them, and returns the milliseconds from the
    producer's ``send`` to the consumer's ``poll`` returning it. Kept open, it can be timed
    between a pipeline's own requests, on the machine as it is at that moment. Its consumer
    fetches only around its own hop (from ``WARM_S`` before the send): polling all along,
    at the eager 2 ms fetch wait, it would load the broker under the pipeline it sits
    beside."""

    def __init__(self, settings: Settings, topics: int) -> None:
        names = [f"floor-{uuid.uuid4().hex[:8]}-{i}" for i in range(topics)]
        clients.ensure_topics(settings, names)
        self.topic = names[0]
        self.consumer = KafkaConsumer(
            *names,
            **clients.consumer_options(
                settings,
                group_id=f"floor-{uuid.uuid4().hex[:8]}",
                fetch_max_wait_ms=settings.kafka_fetch_wait_eager_ms,
            ),
        )
        self.producer = clients.producer(settings)
        self.read_at: dict[bytes, float] = {}
        self.arrived = threading.Condition()
        self.stop = threading.Event()
        self.polling = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.sent = 0
        self._time(b"warm", timeout_s=30.0)  # joined, assigned

    def once(self) -> float:
        self.sent += 1
        return self._time(f"r{self.sent}".encode())

    def close(self) -> None:
        self.stop.set()
        self.polling.set()
        self.reader.join()
        self.consumer.close()
        self.producer.close()

    def __enter__(self) -> Hop:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _read(self) -> None:
        while not self.stop.is_set():
            if not self.polling.wait(1.0):
                continue
            for batch in self.consumer.poll(timeout_ms=30).values():
                now = time.perf_counter()
                with self.arrived:
                    self.read_at.update((r.value, now) for r in batch)
                    self.arrived.notify_all()

    def _time(self, value: bytes, timeout_s: float = 10.0) -> float:
        self.polling.set()
        try:
            time.sleep(WARM_S)  # the consumer's fetch parked at the broker, as a pipeline's is
            sent = time.perf_counter()
            self.producer.send(self.topic, value)
            self.producer.flush()
            with self.arrived:
                if not self.arrived.wait_for(lambda: value in self.read_at, timeout_s):
                    raise TimeoutError(
                        f"a record sent to {self.topic} was not read within {timeout_s} s"
                    )
            return (self.read_at[value] - sent) * 1000
        finally:
            self.polling.clear()


def hop_ms(settings: Settings, topics: int, records: int = 60, gap_s: float = 0.05) -> list[float]:
    """``records`` hops (``Hop``), sent ``gap_s`` apart."""
    with Hop(settings, topics) as hop:
        out = []
        for _ in range(records):
            time.sleep(gap_s)
            out.append(hop.once())
        return out
