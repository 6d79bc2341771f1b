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

A broker can also be too slow for the short waits: after a tansu restart on S3 storage,
fetches of a reply topic that may wait 2 ms came back empty every time though records were
there (one that may wait 100 ms got them in 12-20 ms). The reader's stall watch says so
(``slow_reads``): for ``SLOW_READS_S`` this reader never waits less than ``busy_ms`` (then
it tries the short waits again; a broker still slow stalls it again, and is caught again).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka import KafkaConsumer

from headrace.config.settings import Settings
from headrace.transport.kafka import clients as kafka_clients

GRACE_S = 1.0  # eager this long after the last thing awaited
SLOW_READS_S = 300.0  # how long a floor under the wait lasts (slow_reads)


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
        self.floor_ms = 0  # busy_ms once reads were seen too slow for shorter waits
        self._floor_until = -float("inf")

    def choose(self, *, awaited: bool, flood: bool) -> int:
        """The wait for this pass: ``awaited``: a record is expected soon (a request in
        flight, a reply pending); ``flood``: many are."""
        if self.floor_ms and self.clock() >= self._floor_until:
            self.floor_ms = 0
        return max(self.floor_ms, self._choose(awaited=awaited, flood=flood))

    def _choose(self, *, awaited: bool, flood: bool) -> int:
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

    def slow_reads(self) -> bool:
        """Fetches came back empty though records were past the position: wait no less than
        ``busy_ms`` for ``SLOW_READS_S`` (from the next ``apply``). False if that was so
        already."""
        self._floor_until = self.clock() + SLOW_READS_S
        if self.floor_ms >= self.busy_ms:
            return False
        self.floor_ms = self.busy_ms
        return True

    def new_consumer(self) -> None:
        """A replacement consumer starts with the busy wait."""
        self.current_ms = self.busy_ms
