"""The ledger's seam: what dispatcher and workers keep in shared state (who answered which
request, who computes which batch, completion notices, worker beats), its rules and
its types. ``RedisLedger`` is the real one, ``MemoryLedger`` the in-process one for unit
tests of batch rules; one contract test (tests/workers/ledger/test_contract.py) holds both
to the same behaviour."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from headrace.schemas.messages import Completion

ANSWERED = "answered"
SENDING_PREFIX = "sending:"
WORKER_INFO_TTL_S = 60  # a worker's self-description outlives its last beat this long
BEATS_KEPT_S = 60  # beats older than this are dropped from a bucket's live set

Key = tuple[str, str]  # (tenant, request_id)


@dataclass(frozen=True)
class ReplyAt:
    """Where a request's final reply was acknowledged by the broker."""

    topic: str
    partition: int
    offset: int

    def encode(self) -> str:
        return f"{self.partition}:{self.offset}:{self.topic}"

    @classmethod
    def decode(cls, raw: bytes) -> ReplyAt:
        partition, offset, topic = raw.decode().split(":", 2)
        return cls(topic, int(partition), int(offset))


class ClaimState(StrEnum):
    fresh = "fresh"  # claimed for us: compute and answer it
    cancelled = "cancelled"  # claimed for us, but cancelled: answer `cancelled`
    answered = "answered"  # a reply was produced already: do nothing
    busy = "busy"  # another attempt holds it now


class Ledger(ABC):
    """Idempotency claims by (tenant, request_id), cancellations, running batches,
    completions to each dispatcher and worker liveness. Every method takes lists and costs
    one round trip where the store allows it."""

    # --- claims ------------------------------------------------------------------------------
    @abstractmethod
    def claim(
        self, ids: list[Key], owner: str, lease_ms: int, worker_id: str | None = None
    ) -> list[ClaimState]:
        """Claim ``ids`` for ``owner`` (a batch id) for ``lease_ms``: ``answered`` ones are
        left, ones another owner holds are ``busy``, the rest are taken (``fresh``, or
        ``cancelled`` where a cancel was asked). With ``worker_id``, also record that this
        worker computes the batch (``runners``)."""

    @abstractmethod
    def begin_send(self, ids: list[Key], owner: str, ttl_ms: int) -> list[bool]:
        """Turn ``owner``'s claims into ``sending:<owner>`` for ``ttl_ms`` (its replies are
        going out); returns which of ``ids`` were cancelled."""

    @abstractmethod
    def holders(self, ids: list[Key]) -> list[str | None]:
        """The raw claim values: an owner, ``sending:<owner>``, ``answered`` or None."""

    @abstractmethod
    def mark_answered(self, ids: list[Key], where: Mapping[Key, ReplyAt] | None = None) -> None:
        """Mark ``ids`` answered (kept ``answered_ttl_s``); ``where``: their replies landed."""

    @abstractmethod
    def replies_at(self, ids: list[Key]) -> list[ReplyAt | None]:
        """Where each request's reply landed (None: not recorded)."""

    @abstractmethod
    def take_if(self, ids: list[Key], expected: list[str], owner: str, lease_ms: int) -> list[bool]:
        """Claim each of ``ids`` for ``owner`` whose value is still its ``expected`` one."""

    @abstractmethod
    def release(self, ids: list[Key], owner: str) -> int:
        """Drop ``owner``'s claims, computing or sending (its attempt died or failed before
        answering), so the next attempt need not wait for them to expire. Returns how many
        were released."""

    @abstractmethod
    def finish(
        self,
        ids: list[Key],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[Key, ReplyAt] | None,
        *,
        last: bool,
    ) -> None:
        """Mark ``ids`` answered, queue ``completion`` for the dispatcher and, if ``last``,
        drop the batch from the running ones: one round trip."""

    # --- cancellation, running batches, epoch, completions --------------------------------
    @abstractmethod
    def cancel(self, tenant: str, request_id: str) -> None: ...

    @abstractmethod
    def cancelled(self, ids: list[Key]) -> list[bool]: ...

    @abstractmethod
    def end_batch(self, batch_id: str) -> None: ...

    @abstractmethod
    def runners(self, batch_ids: list[str]) -> list[str | None]:
        """The worker computing each batch (None: none recorded)."""

    @abstractmethod
    def epoch(self, candidate: str) -> str:
        """The store's epoch, set to ``candidate`` if it has none (a fresh or wiped store)."""

    @abstractmethod
    def take_completions(self, dispatcher_id: str, limit: int = 1000) -> list[Completion]:
        """The dispatcher's completion notices, oldest first, taken off the queue."""

    # --- worker liveness ---------------------------------------------------------------------
    @abstractmethod
    def heartbeat(
        self, worker_id: str, buckets: list[int], info: Mapping[str, object] | None = None
    ) -> None:
        """``info``: the worker's version and plan (``WorkerInfo``), kept a minute."""

    @abstractmethod
    def worker_info(self, worker_ids: list[str]) -> dict[str, dict[str, Any]]:
        """What each of ``worker_ids`` said of itself at its last beat (absent: nothing)."""

    @abstractmethod
    def retire(self, worker_id: str, buckets: list[int]) -> None: ...

    @abstractmethod
    def live_workers(self, buckets: list[int], within_s: float) -> dict[int, set[str]]:
        """For each bucket, the ids of the workers that beat within ``within_s``."""

    # --- rules built on the above, one copy for every store ----------------------------------
    def finish_batch(
        self,
        ids: list[Key],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[Key, ReplyAt] | None = None,
    ) -> None:
        """Mark ``ids`` answered (``where``: their replies landed), tell the dispatcher, and
        drop the batch from the running ones."""
        self.finish(ids, dispatcher_id, completion, where, last=True)

    def finish_rows(
        self,
        ids: list[Key],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[Key, ReplyAt] | None = None,
    ) -> None:
        """``finish_batch`` for some of a batch's requests, answered while the batch goes on
        (it stays running)."""
        self.finish(ids, dispatcher_id, completion, where, last=False)

    def reclaim(self, ids: list[Key], owner: str, lease_ms: int) -> list[bool]:
        """Claim answered requests again whose reply the broker lost (read back: not where
        ``replies_at`` says); True for each one claimed for ``owner``."""
        return self.take_if(ids, [ANSWERED] * len(ids), owner, lease_ms)

    def take_from_dead(
        self,
        ids: list[Key],
        holders: list[str],
        owner: str,
        lease_ms: int,
        beat_within_s: float,
        buckets: list[int],
    ) -> list[bool]:
        """Claim for ``owner`` those of ``ids`` whose holder (``holders``: the raw claim
        values) is an attempt computing on a worker that stopped beating: a killed worker's
        claims need not run out first. An attempt that was *sending* keeps its claim (its
        replies may be out; only the reply topic can tell)."""
        if not ids:
            return []
        batches = sorted({h for h in holders if not h.startswith(SENDING_PREFIX)})
        runner_of = dict(zip(batches, self.runners(batches), strict=True))
        live = set().union(*self.live_workers(buckets, beat_within_s).values())
        dead = {b for b, w in runner_of.items() if w is not None and w not in live}
        take = [(key, h) for key, h in zip(ids, holders, strict=True) if h in dead]
        if not take:
            return [False] * len(ids)
        got = self.take_if([k for k, _ in take], [h for _, h in take], owner, lease_ms)
        taken = {key for (key, _), ok in zip(take, got, strict=True) if ok}
        return [key in taken for key in ids]
