"""kafka-python's own view of a partition, for diagnosis only: it reads the client's
internals (kafka-python 3.0.12), so it may say less on another version, never more."""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer
from kafka.structs import TopicPartition


def partition_state(consumer: KafkaConsumer, tp: TopicPartition) -> dict[str, Any] | None:
    """Fetchable or not and why (paused, pending revocation, awaiting validation or reset),
    its position, and what the fetcher holds for it; None if it is not assigned."""
    state = consumer._subscription.assignment.get(tp)
    if state is None:
        return None
    return {
        "fetchable": state.is_fetchable(),
        "paused": state.paused,
        "pending_revocation": getattr(state, "_pending_revocation", None),
        "awaiting_validation": state.awaiting_validation,
        "awaiting_reset": state.awaiting_reset,
        "position": state.position,
        "fetcher": _fetcher_state(consumer, tp),
    }


def _fetcher_state(consumer: KafkaConsumer, tp: TopicPartition) -> dict[str, Any]:
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None:
        return {}
    current = fetcher._next_partition_records
    return {
        "completed_fetches": sum(
            1 for f in list(fetcher._completed_fetches) if f.topic_partition == tp
        ),
        "parked_completed": tp in fetcher._paused_completed_fetches,
        "parked_records": tp in fetcher._paused_partition_records,
        "next_records": None if current is None else (str(current.topic_partition), bool(current)),
        "pending_fetch_nodes": sorted(fetcher._nodes_with_pending_fetch_requests),
    }
