"""kafka-python's own view of a partition, for diagnosis only: it reads the client's
internals (kafka-python 3.0.12), so it may say less on another version, never more."""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer, KafkaProducer
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


def producer_state(producer: KafkaProducer, future: Any) -> dict[str, Any]:
    """What kafka-python's producer holds for the partition of an unanswered record (its
    ``send`` future): the partition's leader in the producer's metadata, whether it is
    muted, the batches waiting and their attempts, and the leader's connection state."""
    tp = getattr(getattr(future, "_produce_future", None), "topic_partition", None)
    if tp is None:
        return {}
    cluster = getattr(producer, "_metadata", None)
    accumulator = getattr(producer, "_accumulator", None)
    leader = cluster.leader_for_partition(tp) if cluster is not None else None
    batches = list(getattr(accumulator, "_batches", {}).get(tp, ()))
    client = getattr(getattr(producer, "_sender", None), "_client", None)
    return {
        "partition": tp.partition,
        "leader": leader,
        "muted": tp in getattr(accumulator, "muted", set()),
        "batches": [(b.attempts, b.record_count) for b in batches],
        "ready": client.is_ready(leader) if client is not None and leader is not None else None,
        "in_flight": client.in_flight_request_count(leader)
        if client is not None and leader is not None and leader >= 0
        else None,
    }
