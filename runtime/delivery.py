"""A Kafka producer wrapper that gets records to the broker or says clearly that it could not.

kafka-python's idempotent producer turns some broker errors into a *fatal* state (seen with
tansu while its S3 store was down: ``UnknownError`` → "Aborting producer batches due to fatal
error"), after which every send fails. ``flush`` here checks every record it sent; failed ones
are sent again on a fresh producer, with backoff, until ``timeout_s`` runs out, and only then
raises ``DeliveryError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka import KafkaProducer

log = logging.getLogger(__name__)

BACKOFF_S = (0.2, 0.5, 1.0, 2.0)
PRUNE_AT = 10_000


class DeliveryError(RuntimeError):
    """Records the broker did not acknowledge within the delivery timeout."""


@dataclass
class _Sent:
    topic: str
    key: bytes | None
    value: bytes
    future: Any


class ReliableProducer:
    def __init__(self, factory: Callable[[], KafkaProducer], timeout_s: float) -> None:
        self._factory = factory
        self.timeout_s = timeout_s
        self.producer = factory()
        self._sent: list[_Sent] = []
        self.replaced = 0

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        future = self.producer.send(topic, key=key, value=value)
        self._sent.append(_Sent(topic, key, value, future))
        if len(self._sent) >= PRUNE_AT:  # callers that rarely flush: forget the delivered
            self._sent = [s for s in self._sent if not (s.future.is_done and s.future.succeeded())]

    def flush(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            pending, self._sent = self._sent, []
            self.producer.flush(timeout=max(0.1, deadline - time.monotonic()))
            failed = [s for s in pending if not (s.future.is_done and s.future.succeeded())]
            if not failed:
                return
            error = failed[0].future.exception if failed[0].future.is_done else "timeout"
            if time.monotonic() >= deadline:
                self._sent = failed
                raise DeliveryError(f"{len(failed)} records not delivered: {error!r}")
            log.warning("%d records not delivered (%r); sending them again", len(failed), error)
            time.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            attempt += 1
            self._replace()
            for s in failed:
                self.send(s.topic, s.value, s.key)

    def _replace(self) -> None:
        """A fresh producer first (creating one fails while the broker is unreachable: then
        keep the old one and try again on the next round), then close the failed one."""
        try:
            fresh = self._factory()
        except Exception as exc:
            log.warning("no fresh producer yet (%r); keeping the old one", exc)
            return
        old, self.producer = self.producer, fresh
        try:
            old.close(timeout=0)
        except Exception:  # a producer in a fatal state may fail to close; it is dropped anyway
            log.debug("closing the failed producer", exc_info=True)
        self.replaced += 1

    def close(self, timeout_s: float = 5) -> None:
        self.producer.close(timeout=timeout_s)
