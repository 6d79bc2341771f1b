"""What a kafka-python producer knows of its topics, read from its internals for tests of
``fixes.track_topics``: the sends that had to wait to learn their topic, and refreshes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka import KafkaProducer

from tests.eventually import eventually


def unknown_topic_waits(producer: KafkaProducer) -> list[str]:
    """From now on, the topics of ``producer``'s sends that found their metadata unknown
    (and so waited for a refresh), in order; the list fills as it sends."""
    waited: list[str] = []
    wait = producer._wait_on_metadata

    def counted(topic: str, max_wait_ms: float) -> Any:
        if producer._metadata.partitions_for_topic(topic) is None:
            waited.append(topic)
        return wait(topic, max_wait_ms)

    producer._wait_on_metadata = counted
    return waited


def refresh(producer: KafkaProducer, tracked: Iterable[str], timeout_s: float = 10) -> bool:
    """Once ``producer`` tracks every one of ``tracked`` (its sender thread adds them on its
    next turn), a metadata refresh asked for and answered: what it knows afterwards is what
    it tracks. Whether the answer succeeded; ``eventually``'s failure if either never came."""
    metadata = producer._metadata
    wanted = set(tracked)
    eventually(lambda: wanted <= metadata._topics, timeout_s, "the topics tracked", 0.005)
    answered = metadata.request_update()
    producer._sender.wakeup()
    eventually(lambda: answered.is_done, timeout_s, "the metadata refresh", 0.005)
    return bool(answered.succeeded())


def knows(producer: KafkaProducer, topics: Iterable[str], timeout_s: float = 10) -> bool:
    """Wait until ``producer`` knows the partitions of every one of ``topics``."""
    metadata = producer._metadata
    return eventually(
        lambda: all(metadata.partitions_for_topic(t) is not None for t in topics),
        timeout_s,
        "the topics' partitions",
        0.005,
    )
