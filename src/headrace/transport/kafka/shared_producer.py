"""One kafka-python producer for the many writers of a process (``SharedProducer``).

kafka-python's producer is thread-safe, and one shared by threads is faster than one each
(its own documentation says so): a continuous-batching worker's 64 batch threads each made
one for their replies, 64 broker connections and network threads a worker and about 7 ms of
CPU each as its first batch began. Writers that share one still keep their own records
and flushes (``ReliableProducer``); what they share is the client, and so its fate:

- **Replaced** (its records refused, a fatal state): the writer that finds it so makes a
  fresh one for everybody; the old one is *retired*, not closed, so another writer's records
  still in flight on it are acknowledged as usual; it is closed when its last writer has moved
  to the fresh one (a writer moves at its next send with nothing of its own pending).
- **Given up** (stuck: a batch waiting, nothing in flight, its leader never connected again):
  it is closed at once, for everybody, so that nothing stuck on it can reach the broker after
  being sent again; every writer with records on it reads their partitions back and sends
  only what is not there (``given_up``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable

from kafka import KafkaProducer

log = logging.getLogger(__name__)


class SharedProducer:
    def __init__(self, factory: Callable[..., KafkaProducer]) -> None:
        """``factory``: called bare for the first producer, with the replacement's options
        for a fresh one (see ``ReliableProducer``)."""
        self._factory = factory
        self._lock = threading.Lock()
        self.current: KafkaProducer | None = None
        self._users: dict[int, int] = {}  # id(producer) -> writers on it
        self._retired: dict[int, KafkaProducer] = {}
        # closed as stuck (weak: a record sent on one keeps it known while it is checked)
        self._given_up: weakref.WeakSet[KafkaProducer] = weakref.WeakSet()
        self.made = 0

    def acquire(self) -> KafkaProducer:
        """The producer writers use now (made on first use), one more writer on it."""
        with self._lock:
            if self.current is None:
                self.current = self._factory()
                self.made += 1
            return self._join(self.current)

    def replace(self, failed: KafkaProducer, **options: object) -> KafkaProducer:
        """A writer is done with ``failed``: the producer to use instead (a fresh one if
        ``failed`` is still the current, made with ``options``; the one another writer made
        already if not). Making one fails while the broker is unreachable: the exception
        goes to the caller, who keeps ``failed``."""
        with self._lock:
            if failed is self.current:
                fresh = self._factory(**options)
                self.made += 1
                self._retired[id(failed)] = failed
                self.current = fresh
            assert self.current is not None
            return self._move(failed, self.current)

    def adopt(self, mine: KafkaProducer) -> KafkaProducer:
        """The current producer, for a writer on ``mine`` with nothing pending on it."""
        current = self.current
        if current is mine or current is None:
            return mine
        with self._lock:
            assert self.current is not None
            return self._move(mine, self.current)

    def give_up(self, stuck: KafkaProducer, **options: object) -> KafkaProducer | None:
        """``stuck`` sends nothing more, for any writer: a fresh one is made first (if
        ``stuck`` is still the current), then ``stuck`` is closed (see above); the producer
        to use instead. None: no fresh one could be made; nothing was closed."""
        with self._lock:
            if stuck is self.current:
                try:
                    fresh = self._factory(**options)
                except Exception as exc:
                    log.warning("no fresh producer yet (%r); keeping the stuck one", exc)
                    return None
                self.made += 1
                self.current = fresh
            if stuck not in self._given_up:
                self._given_up.add(stuck)
                self._retired[id(stuck)] = stuck
                _close(stuck)
            assert self.current is not None
            return self._move(stuck, self.current)

    def given_up(self, producer: KafkaProducer | None) -> bool:
        return producer is not None and producer in self._given_up

    def release(self, producer: KafkaProducer) -> None:
        """A writer on ``producer`` is closed."""
        with self._lock:
            self._leave(producer)

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            current, self.current = self.current, None
            retired = list(self._retired.values())
            self._retired.clear()
        for producer in retired:
            _close(producer)
        if current is not None:
            current.close(timeout=timeout_s)

    def _join(self, producer: KafkaProducer) -> KafkaProducer:
        self._users[id(producer)] = self._users.get(id(producer), 0) + 1
        return producer

    def _move(self, old: KafkaProducer, new: KafkaProducer) -> KafkaProducer:
        if old is not new:
            self._leave(old)
            self._join(new)
        return new

    def _leave(self, producer: KafkaProducer) -> None:
        """Under the lock: one writer less on ``producer``; a retired one left by its last
        writer is closed (one given up is closed already)."""
        key = id(producer)
        left = self._users.get(key, 0) - 1
        if left > 0:
            self._users[key] = left
            return
        self._users.pop(key, None)
        if self._retired.pop(key, None) is not None:
            _close(producer)


def _close(producer: KafkaProducer) -> None:
    with contextlib.suppress(Exception):  # a producer in a fatal state may fail to close
        producer.close(timeout=0)
