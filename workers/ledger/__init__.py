"""Shared state of dispatchers and workers (``base.Ledger``): who answered which request,
who computes which batch, completion notices and worker beats. ``RedisLedger`` in
production, ``MemoryLedger`` in unit tests."""

from __future__ import annotations

from headrace.workers.ledger.base import (
    ANSWERED,
    SENDING_PREFIX,
    ClaimState,
    Key,
    Ledger,
    ReplyAt,
)
from headrace.workers.ledger.memory import MemoryLedger
from headrace.workers.ledger.redis_ledger import RedisLedger

__all__ = [
    "ANSWERED",
    "SENDING_PREFIX",
    "ClaimState",
    "Key",
    "Ledger",
    "MemoryLedger",
    "RedisLedger",
    "ReplyAt",
]
