"""A backlog taken over: of the records produced before this dispatcher held their partition,
the requests the ledger already has as answered (by the dispatcher that held it before, or
its workers), done at once instead of sent again."""

from __future__ import annotations

from collections.abc import Mapping

from headrace.connections import REDIS_ERRORS
from headrace.transport import Partition, Record
from headrace.workers.dispatcher.events import RequestKey
from headrace.workers.dispatcher.intake import request_key
from headrace.workers.ledger import ANSWERED, Ledger


def answered_before(
    polled: Mapping[Partition, list[Record]],
    held_since_ms: Mapping[Partition, int],
    ledger: Ledger,
) -> frozenset[RequestKey]:
    """``held_since_ms``: when this dispatcher got each partition. One MGET for the records
    older than that; none on the normal path (every record newer)."""
    keys: list[RequestKey] = []
    for partition, records in polled.items():
        held_since = held_since_ms.get(partition)
        for record in records:
            if held_since is None or (record.timestamp_ms or 0) >= held_since:
                continue
            key = request_key(record.value)
            if key is not None:
                keys.append(key)
    if not keys:
        return frozenset()
    try:
        holders = ledger.holders(keys)
    except REDIS_ERRORS:  # not known: they are sent again, and answered once anyway
        return frozenset()
    return frozenset(k for k, h in zip(keys, holders, strict=True) if h == ANSWERED)
