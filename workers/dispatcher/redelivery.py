"""When a batch sent to a worker is sent again, and how: pure policy over the dispatcher's
flight records.

- **Leases.** A batch no worker has started within its lease is sent again as it was (its
  copy may sit in a lost queue; that says nothing about its requests). One a live worker is
  computing keeps its lease up to ``LEASE_HARD_FACTOR`` leases: its claims keep a second
  copy from computing meanwhile. With no live worker for the bucket the lease is extended:
  sending it again would change nothing.
- **Failed attempts** (a worker died computing it, or it ran past its hard lease): the
  unanswered requests are sent again split in halves, so a request that kills its batch
  ends up alone; failing alone ``max_attempts`` times, it is given up
  (``redelivery_exhausted``).
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from enum import Enum

from headrace.workers.dispatcher.flights import InFlight, Pending

LEASE_HARD_FACTOR = 3  # a live worker may hold a batch this many leases before it is resent


class Lease(Enum):
    running = "running"  # within its lease, or a live worker is on it
    extend = "extend"  # past it, but no worker could have taken it
    resend = "resend"  # past it, never started: send it again as it was
    failed = "failed"  # past the hard lease with a worker on it: a failed attempt


def lease_verdict(flight: InFlight, now: float, live: Set[str], bucket_live: bool) -> Lease:
    """``live``: every worker with a recent heartbeat; ``bucket_live``: some of them serve
    the flight's bucket."""
    if flight.lease_deadline > now:
        return Lease.running
    if flight.runner is not None and flight.runner in live:
        if now - flight.lease_deadline < (LEASE_HARD_FACTOR - 1) * flight.lease_s:
            return Lease.running
        return Lease.failed
    if flight.runner is None:
        return Lease.resend if bucket_live else Lease.extend
    return Lease.failed  # its worker is gone


@dataclass
class Redelivery:
    """Batches to put at the front of the bucket's queue, in this order, and the request
    given up on, if any."""

    batches: list[list[Pending]] = field(default_factory=list)
    exhausted: Pending | None = None


def after_failure(alive: list[Pending], max_attempts: int) -> Redelivery:
    """The unanswered requests of a failed attempt: counted, then split in halves (the
    second half goes first), or the one alone given up on after ``max_attempts``."""
    if not alive:
        return Redelivery()
    for p in alive:
        p.failures += 1
    if len(alive) == 1:
        alive[0].solo_failures += 1
        if alive[0].solo_failures >= max_attempts:
            return Redelivery(exhausted=alive[0])
    half = (len(alive) + 1) // 2
    return Redelivery(batches=[part for part in (alive[half:], alive[:half]) if part])


def exhausted_message(pending: Pending) -> str:
    return (
        f"its batch crashed or ran past its lease {pending.failures} times, "
        f"{pending.solo_failures} of them with this request alone"
    )
