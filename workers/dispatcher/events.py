"""What the dispatcher core takes in (events) and gives back (actions): plain frozen
dataclasses, the whole contract between the core and its shell.

The shell turns what it read (records, control records, completion notices, heartbeats)
into events; the core answers each with the actions to carry out (batches to send, error
replies, records forwarded to their proper bucket, commits, pauses, seeks, reply-topic
scans). An action whose outcome the core must know comes back as an event: an answer
deferred to the worker holding its request (``AnswerDeferred``), answers and forwards the
broker acknowledged (``AnswersDelivered``), a batch the queue refused (``BatchNotSent``), a
scan's findings (``Settled``), results a ``Share`` did not find (``NotShared``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from headrace.limits.policy import TenantLimits, TenantUsage
from headrace.models.traffic import TrafficPolicy
from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.errors import ErrorInfo
from headrace.schemas.messages import (
    Batch,
    CacheTier,
    Completion,
    Degraded,
    RecordRef,
    Request,
)
from headrace.schemas.results import Result
from headrace.transport.base import Headers, Partition, Record

RequestKey = tuple[str, str]  # (tenant, request_id)

# --- events -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordsRead:
    """Request records, by partition, read at ``wall_time`` (unix seconds: arrival stamps
    and deadlines)."""

    records: Mapping[Partition, Sequence[Record]]
    wall_time: float
    # of these records' requests, those the ledger has as answered (looked up for records
    # produced before this dispatcher held their partition: a predecessor's backlog)
    answered: frozenset[RequestKey] = frozenset()


@dataclass(frozen=True)
class Cancelled:
    """Cancellations read from the control topic (already recorded in the ledger)."""

    keys: Sequence[RequestKey]


@dataclass(frozen=True)
class CompletionsRead:
    completions: Sequence[Completion]


@dataclass(frozen=True)
class WorkersSeen:
    """Heartbeats: the live workers of each bucket, and which worker computes each batch
    in flight (None: none has started it)."""

    live: Mapping[int, frozenset[str]]
    runners: Mapping[str, str | None] = field(default_factory=dict)
    # what live workers say of themselves: the model version each serves, and each one's
    # memory plan (bucket -> the rows a batch of that bucket may hold on it)
    versions: Mapping[str, str] = field(default_factory=dict)
    plans: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    # batches each worker holds at once (continuous batching; absent: 1)
    slots: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TrafficSeen:
    """The served model's stable version and traffic policy (``revision`` counts changes)."""

    stable: str
    policy: TrafficPolicy | None = None
    revision: int = 0


@dataclass(frozen=True)
class StateUnavailable:
    """Redis could not be reached: batches wait, no bucket counts as without workers."""

    reason: str


@dataclass(frozen=True)
class StateLost:
    """Redis came back empty: queues, claims and completion notices are gone."""


@dataclass(frozen=True)
class AnswerDeferred:
    """A worker holds the request of an ``Answer`` with ``may_defer``: it answers."""

    ref: RecordRef


@dataclass(frozen=True)
class AnswersDelivered:
    """The broker acknowledged what was sent for these records: answers, dead letters,
    forwarded copies."""

    refs: Sequence[RecordRef]


@dataclass(frozen=True)
class BatchNotSent:
    batch_id: str


@dataclass(frozen=True)
class HandedOff:
    """The batch went straight to an idle worker (``workers/handoff.py``), not to Celery's
    queue: its runner is known from now on, so the worker's death sends it again."""

    batch_id: str
    worker_id: str


@dataclass(frozen=True)
class Settled:
    """What a ``Settle`` found: the requests whose reply is on their reply topic."""

    job_id: str
    answered: frozenset[RequestKey]


@dataclass(frozen=True)
class PartitionsRevoked:
    """The group takes these partitions away; the core's ``Commit`` must run before."""

    partitions: Sequence[Partition]


@dataclass(frozen=True)
class PartitionsLost:
    """The reader was replaced: every partition it held went without a commit."""

    partitions: Sequence[Partition]


@dataclass(frozen=True)
class LimitsSynced:
    """What a ``SyncLimits`` read back: tenants' counts over every dispatcher, and every
    tenant's override of the default limits."""

    usage: Mapping[str, TenantUsage]
    overrides: Mapping[str, TenantLimits]


@dataclass(frozen=True)
class LimitsNotSynced:
    """Redis refused a ``SyncLimits``: its counts are to be added next time."""

    deltas: Mapping[str, TenantUsage]


@dataclass(frozen=True)
class BacklogSeen:
    """Each bucket's online records not yet answered, over every live dispatcher."""

    backlog: Mapping[int, int]


@dataclass(frozen=True)
class TenantKeysRead:
    """The tenant keys folder changed: these are the keys now (schemas/signing.py)."""

    keys: Mapping[str, Sequence[bytes]]


@dataclass(frozen=True)
class NotShared:
    """What a ``Share`` found no result for: these requests are computed on their own."""

    refs: Sequence[RecordRef]


@dataclass(frozen=True)
class Tick:
    """Time passed (the core reads its own clock): batches due, leases, commits."""


Event = (
    RecordsRead
    | Cancelled
    | CompletionsRead
    | WorkersSeen
    | StateUnavailable
    | StateLost
    | AnswerDeferred
    | AnswersDelivered
    | BatchNotSent
    | HandedOff
    | Settled
    | PartitionsRevoked
    | PartitionsLost
    | LimitsSynced
    | LimitsNotSynced
    | BacklogSeen
    | TrafficSeen
    | TenantKeysRead
    | NotShared
    | Tick
)

# --- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SendBatch:
    batch: Batch
    queue: str
    real_tokens: int
    padded_tokens: int
    lengths: tuple[int, ...] = ()  # each row's tokens (the lengths its bucket sees)
    shadow: bool = False  # a shadow copy: nothing waits for it
    # an online batch sent while its bucket had a free place: it may go straight to an idle
    # worker (workers/handoff.py); the others queue behind what Celery holds, in order
    handoff: bool = False


@dataclass(frozen=True)
class Answer:
    """Answer a record with ``error`` (on ``reply_to``, when there is one) unless its request
    was answered already, and send ``dead_letter``. With ``may_defer``, a request a worker
    holds right now is left to it (``AnswerDeferred``) and nothing is sent. A rung of the
    degradation ladder answers with ``result`` instead, marked ``degraded``."""

    ref: RecordRef
    error: ErrorInfo | None
    key: RequestKey | None = None
    reply_to: str | None = None
    model: str = ""
    dead_letter: DeadLetter | None = None
    may_defer: bool = False
    result: Result | None = None
    degraded: Degraded | None = None
    model_version: str | None = None
    cache_tier: CacheTier | None = None


@dataclass(frozen=True)
class LookUpCache:
    """The ladder's cache rung: answer ``request`` with a result the cache holds for it
    (even a stale one: under the key of the version its traffic policy gives it, or of the
    model's previous stable version), marked with ``reason``; without one, carry
    ``otherwise`` out."""

    request: Request
    reason: Literal["no_workers", "failing", "late"]
    otherwise: Answer


@dataclass(frozen=True)
class Share:
    """In-flight coalescing (``coalescing``): ``leader`` was answered; answer each of
    ``answers`` (requests identical to it that waited on its computation) with the result
    the cache holds for the leader's key under ``version`` (None: the version a client
    would look up), or, where there is none, say ``NotShared``."""

    leader: Request
    version: str | None
    answers: Sequence[Answer]


@dataclass(frozen=True)
class Forward:
    """Produce a request record, as it was read, to the topic of its proper bucket (same key
    and bytes); its record here is done once the broker has acknowledged the copy."""

    ref: RecordRef
    topic: str
    key: bytes | None
    value: bytes
    headers: Headers = ()


@dataclass(frozen=True)
class Commit:
    offsets: Mapping[Partition, int]
    sync: bool = False


@dataclass(frozen=True)
class Seek:
    partition: Partition
    offset: int


@dataclass(frozen=True)
class SetPaused:
    topic: str
    paused: bool


@dataclass(frozen=True)
class Settle:
    """Find which of ``wanted`` (reply topic -> requests) have a reply on their topic, mark
    those answered, and say so with ``Settled``. With ``dead_batch``: only the requests that
    attempt held as sending can have been answered; release its claims after."""

    job_id: str
    wanted: Mapping[str, frozenset[RequestKey]]
    dead_batch: str | None = None


@dataclass(frozen=True)
class SyncLimits:
    """Add ``deltas`` (what this dispatcher admitted since the last sync) to the shared
    counts and read back those of ``tenants``; answered with ``LimitsSynced``."""

    deltas: Mapping[str, TenantUsage]
    tenants: Sequence[str]


Action = (
    SendBatch
    | Answer
    | LookUpCache
    | Share
    | Forward
    | Commit
    | Seek
    | SetPaused
    | Settle
    | SyncLimits
)
