"""How long a consumer's fetches may wait at the broker (``fetch_max_wait_ms``), chosen each
pass of its poll loop.

tansu answers a parked fetch only when its wait runs out, so the wait is the latency a new
record can see, and every fetch costs CPU in the consumer and the broker (measured: a
dispatcher fetching every 2 ms while idle took a third of a core, tansu another 15%). So:

- ``eager`` while something is awaited (a lone request's latency counts), and for a grace
  period after, since more usually follows;
- ``busy`` in a flood: records come by the hundred anyway, the CPU is better spent on the
  model;
- ``idle`` once nothing has been awaited for the grace period: the first record after a quiet
  spell waits up to this long;
- ``dormant`` once nothing has been awaited for ``kafka_fetch_dormant_after_s``: an idle
  dispatcher fetching 23 partitions every 20 ms took a fifth of a core, tansu another 15%,
  with nothing to read (measured). The first record after a long silence waits up to this
  long.

With Apache Kafka, which answers as soon as a record lands, set all three waits to 500.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka import KafkaConsumer

from headrace.config.settings import Settings
from headrace.transport.kafka import clients as kafka_clients

GRACE_S = 1.0  # eager this long after the last thing awaited


class FetchWait:
    def __init__(
        self,
        settings: Settings,
        grace_s: float = GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.eager_ms = settings.kafka_fetch_wait_eager_ms
        self.idle_ms = settings.kafka_fetch_wait_idle_ms
        self.busy_ms = settings.kafka_fetch_wait_busy_ms
        self.dormant_ms = settings.kafka_fetch_wait_dormant_ms
        self.dormant_after_s = settings.kafka_fetch_dormant_after_s
        self.grace_s = grace_s
        self.clock = clock
        self._last_awaited = -float("inf")
        self._last_active = clock()  # a new consumer is idle, not dormant, at first
        self.current_ms = self.busy_ms  # what kafka_clients.consumer() starts with

    def choose(self, *, awaited: bool, flood: bool) -> int:
        """The wait for this pass: ``awaited``: a record is expected soon (a request in
        flight, a reply pending); ``flood``: many are."""
        now = self.clock()
        if awaited or flood:
            self._last_awaited = self._last_active = now
        if flood:
            return self.busy_ms
        if awaited or now - self._last_awaited < self.grace_s:
            return self.eager_ms
        if now - self._last_active < self.dormant_after_s:
            return self.idle_ms
        return self.dormant_ms

    def apply(self, consumer: KafkaConsumer, *, awaited: bool, flood: bool) -> int:
        """Choose, and set it on ``consumer`` if it changed."""
        wait_ms = self.choose(awaited=awaited, flood=flood)
        if wait_ms != self.current_ms:
            kafka_clients.set_fetch_wait(consumer, wait_ms)
            self.current_ms = wait_ms
        return wait_ms

    def new_consumer(self) -> None:
        """A replacement consumer starts with the busy wait."""
        self.current_ms = self.busy_ms
