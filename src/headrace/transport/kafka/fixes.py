"""Work-arounds for kafka-python bugs met here, each with the version it was seen in.

**A resumed partition that is never fetched again** (kafka-python 3.0.12). Since KAFKA-7548
the fetcher parks the records it already holds for a partition paused mid-way, and gives them
back on the first ``poll`` after ``resume``, but only when no other partition's records are
in hand: it checks ``_next_partition_records is None``, and a drained record set of another
partition is left there (falsy, not None) until a new fetch response replaces it. Meanwhile
the parked partition is left out of every fetch request. With one busy partition among idle
ones, that is forever: the dispatcher's consumer sat at offset 8,180 with its log at 8,960,
``fetchable`` and not paused, its records parked behind a drained record set of an idle
bucket's topic (seen every ~6,000 records of a bulk job, each time its backpressure paused
and resumed the bucket). ``resume`` below clears the drained record set after resuming, so
the parked records come back on the next poll.

**A record that never leaves the producer** (kafka-python 3.0.12). A new producer's first
metadata covers every topic, but only the topics it *tracks* are asked for afterwards, and
each answer replaces what it knew. A send to a topic known only from that first answer is
accepted without tracking it; if a send to another, new topic then refreshes the metadata,
the first topic's leader is forgotten and its batch waits for a leader that no refresh will
bring (seen: a dispatcher's dead letter, sent just before an error reply to a reply topic
created after the dispatcher started, stayed unanswered until the process ended).
``track_topic`` makes the producer track a topic before the first record is sent to it.

**A producer learns its topics one refresh at a time** (kafka-python 3.0.12). The first
record to a topic it does not track adds that topic and waits for a metadata answer, and
refreshes are at least ``retry_backoff_ms`` (100 ms) apart: a client whose first requests
went to nine bucket topics waited 93-102 ms at each, 0.96 s before its 600th request was
produced (measured; the local stack, a client a second old). ``track_topics`` adds every
topic a writer will send to at once: one refresh answers for all of them.

**A send refused because a metadata answer dropped its topic mid-way** (kafka-python 3.0.12).
Tracking a topic is asynchronous (the sender thread adds it on its next turn), so an answer
to a metadata request made before that can still land, and it replaces what the producer
knew: the new topic is gone again for a moment. ``send`` checks the topic's metadata, then
picks a partition from it; an answer landing between the two makes ``send`` raise
``ValueError`` ("Topic ... not found in ClusterMetadata", or "Partitioner did not assign a
partition"), the record not taken (seen: a client's first sends to eleven bucket topics in
a row, one of 2,000 submissions refused, in a CI run), or, landing inside the partitioner
between its own check and its read of the partitions, ``TypeError`` ("'NoneType' object is
not iterable"; seen once in a CI run, 2026-12-05). ``send`` below waits for the topic's
metadata (now tracked, so every later answer has it) and sends again.

**A partition assigned again keeps its old position and pause** (kafka-python 3.0.12). Under
the eager protocol every partition is revoked before a rebalance, and the Java consumer then
starts each assigned one afresh at the group's committed offset. 3.0.12 keeps the state of a
partition it is given again: its position (past records its owner dropped when it gave the
partition up: they were never read again) and its pause flag (set before the rebalance; the
owner, told that the partition was revoked, never resumed it: seen as a dispatcher holding
four partitions paused forever after a rebalance, their requests never answered).
``start_afresh`` gives such partitions fresh state: not paused, at the committed offset.

**A thread hand-off on every poll to learn what is already known** (kafka-python 3.0.12).
``poll`` asks the group coordinator object whether the coordinator is known through
``NetworkSelector.run``: the question is scheduled on the client's IO thread, which is woken
through its wake socket, and the polling thread blocks on an event until the answer comes
back, on every poll, though the answer is "yes" but for the moments after a coordinator is
lost. A sampling profile of the dispatcher under a flood: 12% of its samples in that one
check. ``known_coordinator_fast`` answers it on the polling thread when the coordinator is
known and its connection is up (two attribute reads), and asks the IO thread as before
otherwise (unknown, disconnected: the IO thread looks it up and reconnects). A lone
request's latency minus compute on the local pipeline, two runs each way: 21.6 and 22.0 ms
p50 before, 17.5 and 16.6 after (the dispatcher and the client's reply listener both poll).

**No send-now without a wait** (kafka-python 3.0.12, not a bug: an API it lacks). ``flush``
makes what was sent ready at once and then blocks until it is acknowledged; a worker wants
its last replies sent at once and to say it is idle *while* they are acknowledged.
``push`` does the first half (the accumulator's flush flag raised, the sender woken) and
``pushed`` lowers that flag after the caller's own ``flush``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import TopicPartitionState
from kafka.producer.future import FutureRecordMetadata
from kafka.structs import TopicPartition
from kafka.util import ensure_valid_topic_name


def resume(consumer: KafkaConsumer, *partitions: TopicPartition) -> None:
    """``consumer.resume(*partitions)``, then let parked records come back (see above).
    Call it from the thread that polls."""
    consumer.resume(*partitions)
    fetcher = getattr(consumer, "_fetcher", None)
    current = getattr(fetcher, "_next_partition_records", None)
    if current is not None and not current:  # drained: nothing is lost by dropping it
        fetcher._next_partition_records = None  # type: ignore[union-attr]


def track_topic(producer: KafkaProducer, topic: str) -> None:
    """Make ``producer`` keep ``topic`` in every metadata refresh (see above). Cheap when it
    already does; call it before the first send to a topic."""
    tracked = getattr(getattr(producer, "_metadata", None), "_topics", None)
    if tracked is not None and topic not in tracked:
        track_topics(producer, (topic,))


def track_topics(producer: KafkaProducer, topics: Iterable[str]) -> None:
    """``track_topic`` for each of ``topics``, before any is sent to, handed to the sender
    thread in one step: it adds them on one turn, so one metadata request asks for all of
    them (one by one, a turn could take some and ask before the rest came). A name that is
    no legal topic is skipped: its own send is refused, nothing else."""
    sender = getattr(producer, "_sender", None)
    tracked = getattr(getattr(producer, "_metadata", None), "_topics", None)
    waiting = getattr(sender, "_topics_to_add", None)
    if sender is None or tracked is None or waiting is None:
        return
    new = [t for t in dict.fromkeys(topics) if t not in tracked and _legal(t)]
    if new:
        waiting.update(new)  # one step under the GIL
        sender.wakeup()


def _legal(topic: str) -> bool:
    """A name kafka-python accepts; another is left to its send, refused there alone."""
    try:
        ensure_valid_topic_name(topic)
    except (TypeError, ValueError):
        return False
    return True


def push(producer: KafkaProducer) -> None:
    """What was sent goes out now, as ``flush`` makes it, without waiting for it: the
    accumulator's flush flag is raised (its batches count as ready whatever their linger) and
    the sender thread woken. The flag stays up until ``pushed`` lowers it, after the caller's
    own ``flush`` (which raises and lowers its own)."""
    producer._accumulator.begin_flush()
    producer._sender.wakeup()


def pushed(producer: KafkaProducer) -> None:
    """Lower the flag ``push`` raised."""
    producer._accumulator._flushes_in_progress.decrement()


DROPPED_TOPIC_TRIES = 3


def send(producer: KafkaProducer, topic: str, **record: Any) -> FutureRecordMetadata:
    """``producer.send(topic, **record)``, sent again once the topic's metadata is back when a
    metadata answer dropped the topic while ``send`` ran (see above); ``KafkaTimeoutError``
    if it is not back within the producer's ``max_block_ms``."""
    for _ in range(DROPPED_TOPIC_TRIES - 1):
        try:
            return producer.send(topic, **record)
        except (ValueError, TypeError):
            if producer._metadata.partitions_for_topic(topic):  # refused for another reason
                raise
            producer.partitions_for(topic)  # waits for an answer that has it
    return producer.send(topic, **record)


def start_afresh(consumer: KafkaConsumer, partitions: Iterable[TopicPartition]) -> None:
    """Forget the position and pause flag of ``partitions`` (just assigned, see above): the
    next poll starts them at the committed offset (or where the reset policy says), as it
    does a partition the consumer never held. Only local state: safe in a rebalance
    listener."""
    assignment = getattr(getattr(consumer, "_subscription", None), "assignment", None)
    if assignment is None:
        return
    for tp in partitions:
        if tp in assignment:
            assignment[tp] = TopicPartitionState()


def known_coordinator_fast(consumer: KafkaConsumer) -> None:
    """Let ``consumer``'s polls skip the IO thread when the group coordinator is known and
    connected (see above). (A consumer without a group never asks.)"""
    coordinator = getattr(consumer, "_coordinator", None)
    client: Any = getattr(coordinator, "_client", None)
    if coordinator is None or not hasattr(client, "connected"):
        return
    ask_io_thread = coordinator.ensure_coordinator_ready

    def ensure_coordinator_ready(timeout_ms: float | None = None) -> bool:
        node = coordinator.coordinator_id
        if node is not None and client.connected(node):
            return True
        return bool(ask_io_thread(timeout_ms))

    coordinator.ensure_coordinator_ready = ensure_coordinator_ready
