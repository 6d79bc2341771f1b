"""Hooks the dispatcher core calls as things happen, named after them (the shape of
dramatiq's middleware): metrics plug in here without growing the core. The base class
does nothing."""

from __future__ import annotations

from collections.abc import Mapping


class Observer:
    def record(self, outcome: str, count: int = 1) -> None:
        """``count`` request records were read with this outcome: ``accepted``,
        ``duplicate`` or an error code (told once a poll)."""

    def batch(self, bucket: int, rows: int, real_tokens: int, padded_tokens: int) -> None:
        """A batch was sent to the bucket's queue."""

    def in_flight(self, batches: Mapping[int, int]) -> None:
        """Batches in flight per bucket: after the first event, then after each that changed
        them."""

    def redispatched(self) -> None:
        """A batch was sent again (lease, dead worker)."""
