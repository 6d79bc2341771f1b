"""Requests the dispatcher answers itself instead of batching them: part of the core, no IO.

- a record that is no request: dead-lettered, and answered where it names a reply topic
  and a request id;
- a request that fails admission (unknown model, expired, too long, cancelled, bucket
  unavailable), one a rung of the degradation ladder answers (a cached or canned result,
  ``ladder``), one cancelled while it waited, one given up on after failing alone
  (``redelivery_exhausted``, dead-lettered too);
- a request that waited on an identical one's computation (``coalescing``): answered with
  its result.

The last four may be *deferred*: if a worker holds the request when the shell claims it,
the worker answers it, and the request goes back to the core (``AnswerDeferred``): queued
as if admitted, or sent again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import (
    Degraded,
    RecordRef,
    Request,
)
from headrace.schemas.results import Result
from headrace.workers.dispatcher.events import Answer
from headrace.workers.dispatcher.flights import Pending, RefKey, ref_key
from headrace.workers.dispatcher.intake import Rejection
from headrace.workers.dispatcher.redelivery import exhausted_message


@dataclass
class Deferrable:
    """What becomes of a request whose answer a worker took over: ``admit`` (a fresh
    record: queue it) or ``requeue`` (a pending request: send it again)."""

    then: Literal["admit", "requeue"]
    request: Request
    bucket: int | None  # None: read from the unbucketed topic
    wall_time: float = 0.0  # when its record was read (admit)
    tokens: int = 0  # its cost in the batch budget (admit)
    pending: Pending | None = None  # requeue


class Refusals:
    def __init__(self) -> None:
        self._deferrable: dict[RefKey, Deferrable] = {}

    def __len__(self) -> int:
        return len(self._deferrable)

    def malformed(self, raw: bytes, ref: RecordRef, why: Rejection) -> Answer:
        info = ErrorInfo(code=why.code, message=why.message)
        letter = DeadLetter.of(raw, source=ref, code=info.code, reason=info.message)
        readable = why.reply_to is not None and why.request_id is not None
        return Answer(
            ref=ref,
            error=info,
            key=(why.tenant, why.request_id) if readable and why.request_id else None,
            reply_to=why.reply_to if readable else None,
            model=why.model,
            dead_letter=letter,
        )

    def not_admitted(
        self,
        request: Request,
        ref: RecordRef,
        bucket: int | None,
        wall_time: float,
        error: ErrorInfo,
        tokens: int = 0,
    ) -> Answer:
        self._deferrable[ref_key(ref)] = Deferrable("admit", request, bucket, wall_time, tokens)
        return _answer(request, ref, error)

    def degraded(
        self,
        request: Request,
        ref: RecordRef,
        bucket: int,
        wall_time: float,
        tokens: int,
        result: Result,
        degraded: Degraded,
    ) -> Answer:
        """A rung of the degradation ladder answers it (deferred like a refusal: a worker
        holding the request answers it itself)."""
        self._deferrable[ref_key(ref)] = Deferrable("admit", request, bucket, wall_time, tokens)
        return replace(_answer(request, ref, None), result=result, degraded=degraded)

    def cancelled(self, pending: Pending, bucket: int) -> Answer:
        info = ErrorInfo(code=ErrorCode.cancelled, message="cancelled before compute")
        return self.dropped(pending, bucket, info)

    def dropped(self, pending: Pending, bucket: int, error: ErrorInfo | None) -> Answer:
        """A request admitted and held, answered before it was computed: with ``error``, or
        (None) with a result the shell fills in (a coalesced request's leader's)."""
        request, ref = pending.item.request, pending.item.ref
        self._deferrable[ref_key(ref)] = Deferrable("requeue", request, bucket, pending=pending)
        return _answer(request, ref, error)

    def exhausted(self, pending: Pending, bucket: int) -> Answer:
        request, ref = pending.item.request, pending.item.ref
        message = exhausted_message(pending)
        info = ErrorInfo(code=ErrorCode.redelivery_exhausted, message=message)
        letter = DeadLetter.of(
            request.model_dump_json().encode(), source=ref, code=info.code, reason=message
        )
        self._deferrable[ref_key(ref)] = Deferrable("requeue", request, bucket, pending=pending)
        return _answer(request, ref, info, dead_letter=letter)

    def deferred(self, ref: RecordRef) -> Deferrable | None:
        """A worker holds the request of ``ref``: what to do with it now."""
        return self._deferrable.pop(ref_key(ref), None)

    def delivered(self, ref: RecordRef) -> None:
        self._deferrable.pop(ref_key(ref), None)


def _answer(
    request: Request,
    ref: RecordRef,
    error: ErrorInfo | None,
    dead_letter: DeadLetter | None = None,
) -> Answer:
    return Answer(
        ref=ref,
        error=error,
        key=(request.tenant, request.request_id),
        reply_to=request.reply_to,
        model=request.model,
        dead_letter=dead_letter,
        may_defer=True,
    )
