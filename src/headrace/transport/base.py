"""The transport seam: what the pipeline needs of a Kafka-protocol broker, as small
interfaces. ``headrace.transport.kafka`` implements them with kafka-python (the default);
``headrace.transport.memory`` in process, for unit tests.

- ``Reader``: a consumer. Reads the partitions it was assigned (``assign``) or that its
  group gave it (``subscribe``), pauses and resumes them, seeks, commits.
- ``Writer``: a producer. ``send`` buffers; ``flush`` returns once every record sent is
  acknowledged, with where each landed, or raises ``DeliveryError``.
- ``Transport``: makes readers and writers, creates topics, and reads a topic as it stands
  (``scan``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Partition = tuple[str, int]  # (topic, partition)
Start = Literal["committed", "beginning", "end"]
Reset = Literal["beginning", "end"]
Headers = tuple[tuple[str, bytes], ...]  # Kafka record headers, in order


class TransportError(RuntimeError):
    """The broker could not be reached, or refused what was asked of it. ``retriable``:
    the same call may succeed later (a timeout, no leader yet); False for a refusal that
    will not change (a record over the size limit, an invalid topic name)."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class DeliveryError(TransportError):
    """Records the broker did not acknowledge within the delivery timeout."""


class UnsupportedClientError(RuntimeError):
    """The installed broker client is not a version the transport was written for."""


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Headers = ()
    timestamp_ms: int | None = None  # the broker's (or producer's) timestamp

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, if the record has one."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    @property
    def tp(self) -> Partition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class Guarantees:
    """What a transport's broker promises. Where it does not, the pipeline compensates, and
    every compensation asks one of these, never which broker it is:

    - ``loses_acked_records``: an acknowledged record may still vanish (tansu has lost some).
      Then clients produce an unanswered request again (``producers.resend``), a writer
      reads its records back where the broker said they landed before it trusts them
      (``transport.kafka.delivery``), and a worker reads a reply back before it takes a
      request the ledger has as answered for answered (``workers.claims.lost_replies``).
    - ``contiguous_offsets``: a partition's offsets have no gaps (no transactional
      producer writes to it). Then a gap in what a poll returns means records the client
      skipped: the dispatcher reads them again (``dispatcher.records``).
    """

    loses_acked_records: bool = False
    contiguous_offsets: bool = True


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where an acknowledged record landed."""

    topic: str
    partition: int
    offset: int
    key: bytes | None


class Rebalance(Protocol):
    """What a group member's owner hears about its partitions."""

    def assigned(self, partitions: list[Partition]) -> None:
        """Each starts at the group's committed offset and not paused, also one this member
        held before the rebalance (what was read of it past the commit is read again)."""
        ...

    def revoked(self, partitions: list[Partition]) -> None:
        """Called before they go: commit what is done now."""
        ...

    def lost(self, partitions: list[Partition]) -> None:
        """Gone without a chance to commit (the reader was replaced)."""
        ...


class Reader(Protocol):
    def subscribe(self, topics: Sequence[str], listener: Rebalance) -> None:
        """Join this reader's group for ``topics``; the group hands out partitions."""
        ...

    def assign(self, topics: Sequence[str], start: Start = "committed") -> list[Partition]:
        """Read every partition of ``topics`` (no group balancing), from ``start``."""
        ...

    def poll(self, timeout_ms: int) -> dict[Partition, list[Record]]: ...

    def expect(self, *, awaited: bool, flood: bool = False) -> None:
        """A hint for the broker round trips: ``awaited``, a record is expected soon (its
        latency counts); ``flood``, many are. A broker that answers fetches as soon as a
        record lands ignores it."""
        ...

    def pause(self, partitions: Sequence[Partition]) -> None: ...

    def resume(self, partitions: Sequence[Partition]) -> None: ...

    def seek(self, partition: Partition, offset: int) -> None: ...

    def position(self, partition: Partition) -> int | None: ...

    def highwater(self, partition: Partition) -> int | None:
        """The log end the last fetch saw (None before one)."""
        ...

    def assignment(self) -> set[Partition]:
        """The partitions this reader reads now (none while its group rebalances)."""
        ...

    def commit(self, offsets: Mapping[Partition, int], *, sync: bool = True) -> None:
        """Commit ``offsets`` (the next offset to read) for this reader's group."""
        ...

    def diagnose(self) -> dict[Partition, dict[str, Any]]:
        """What the client knows of each assigned partition, for logs."""
        ...

    def wakeup(self) -> None:
        """From another thread: make a poll blocked right now return (safe at any time)."""
        ...

    def close(self) -> None: ...


class Writer(Protocol):
    def track(self, topics: Iterable[str]) -> None:
        """The topics this writer will send to, made known to it now, all at once, so that
        the first record to each does not wait to learn where that topic lives."""
        ...

    def send(
        self, topic: str, value: bytes, key: bytes | None = None, headers: Headers = ()
    ) -> None: ...

    def push(self) -> None:
        """What was sent goes to the broker now (not after a linger), without waiting for
        it: a caller with something to do before its ``flush`` waits does it meanwhile."""
        ...

    def flush(self) -> list[Delivered]:
        """Return once every record sent since the last flush is acknowledged; raise
        DeliveryError for those that were not within the delivery timeout (they stay
        pending for the next flush)."""
        ...

    def close(self, timeout_s: float = 5.0) -> None: ...


class Transport(Protocol):
    guarantees: Guarantees  # what its broker promises (and what it does not)

    def reader(
        self,
        group_id: str | None = None,
        *,
        reset: Reset = "beginning",
        max_poll_records: int = 500,
        busy: Callable[[Partition], bool] | None = None,
    ) -> Reader:
        """``reset``: where a partition with no committed offset starts. ``busy(partition)``:
        the owner is not meant to read it now (its work is in flight or held back); a reader
        that watches for stalled fetches skips those."""
        ...

    def writer(
        self, delivery_timeout_s: float, *, idempotent: bool = False, shared: bool = False
    ) -> Writer:
        """``shared``: the writers of this transport asked for with ``shared`` (and the
        same ``idempotent``) share one connection to the broker, each still sending and
        flushing its own records: one a process, not one a thread."""
        ...

    def ensure_topics(self, names: Sequence[str], partitions: int | None = None) -> None:
        """Create those of ``names`` that do not exist yet."""
        ...

    def list_topics(self) -> set[str]:
        """The names of every topic the broker has now (one metadata round trip)."""
        ...

    def scan(
        self, topic: str, partition: int | None = None, start: int | None = None
    ) -> Iterator[Record]:
        """Every record of ``topic`` (or of one partition, from ``start``) up to the end it
        had when the scan began."""
        ...

    def close(self) -> None: ...
