"""Job status, as in the OpenAI Batch API, and the moves between them."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    validating = "validating"
    in_progress = "in_progress"
    finalizing = "finalizing"
    completed = "completed"
    failed = "failed"
    expired = "expired"
    cancelling = "cancelling"
    cancelled = "cancelled"


S = JobStatus
MOVES: dict[JobStatus, frozenset[JobStatus]] = {
    S.validating: frozenset({S.in_progress, S.failed, S.cancelling, S.cancelled}),
    S.in_progress: frozenset({S.finalizing, S.failed, S.expired, S.cancelling}),
    S.finalizing: frozenset({S.completed, S.failed, S.cancelling}),
    S.cancelling: frozenset({S.cancelled, S.failed}),
    S.completed: frozenset(),
    S.failed: frozenset(),
    S.expired: frozenset(),
    S.cancelled: frozenset(),
}
FINAL = frozenset(s for s, nxt in MOVES.items() if not nxt)


class IllegalTransition(ValueError):
    """A job asked to move where its lifecycle does not go (e.g. completed -> cancelling)."""


def check_move(current: JobStatus, target: JobStatus) -> None:
    if target not in MOVES[current]:
        raise IllegalTransition(f"a {current.value} job cannot become {target.value}")
