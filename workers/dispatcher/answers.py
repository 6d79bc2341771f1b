"""The dispatcher's own answers, carried out: error replies, the degradation ladder's
answers (cached or canned results), dead letters, and requests forwarded to their proper
bucket.

A request is answered at most once: an error reply first claims the request in the ledger,
as a worker would. A request a worker holds right now is left to it when the answer may be
deferred. The records answered here are done only once the broker has acknowledged what
was sent for them (``deliver``), and their request ids are then marked answered.
"""

from __future__ import annotations

import logging

from headrace.connections import REDIS_ERRORS
from headrace.schemas.messages import RecordRef, Reply
from headrace.schemas.topics import Topics
from headrace.transport.base import DeliveryError, Writer
from headrace.workers.dispatcher.events import Answer, Forward, RequestKey
from headrace.workers.ledger import ClaimState, Ledger, ReplyAt

log = logging.getLogger(__name__)

CLAIM_LEASE_MS = 60_000


class Answerer:
    def __init__(self, writer: Writer, ledger: Ledger, topics: Topics, owner: str) -> None:
        self.writer = writer
        self.ledger = ledger
        self.topics = topics
        self.owner = owner
        self._sent: list[RecordRef] = []  # done once the writer has flushed ...
        # ... and these are then marked answered, with where their replies landed
        self._to_mark: list[tuple[RequestKey, str]] = []

    @property
    def pending(self) -> bool:
        return bool(self._sent or self._to_mark)

    def answer(self, action: Answer) -> bool:
        """Send what ``action`` asks; False when it was deferred to the worker holding the
        request (nothing sent)."""
        state = ClaimState.fresh
        if action.key is not None and action.reply_to is not None:
            try:
                state = self.ledger.claim([action.key], self.owner, CLAIM_LEASE_MS)[0]
            except REDIS_ERRORS:  # cannot check: answering twice beats never answering
                state = ClaimState.fresh
        if state is ClaimState.busy and action.may_defer:
            return False
        if action.dead_letter is not None:
            self.writer.send(self.topics.dead_letter, action.dead_letter.model_dump_json().encode())
        if state in (ClaimState.fresh, ClaimState.cancelled) and action.reply_to is not None:
            assert action.key is not None
            tenant, request_id = action.key
            reply = Reply(
                request_id=request_id,
                tenant=tenant,
                model=action.model,
                error=action.error,
                result=action.result,
                degraded=action.degraded,
                model_version=action.model_version,
                cache_tier=action.cache_tier,
            )
            try:
                self.writer.send(
                    action.reply_to, reply.model_dump_json().encode(), key=request_id.encode()
                )
            except Exception:  # an unusable reply_to (bad topic name): the dead letter has it
                log.exception("could not send error reply to %r", action.reply_to)
            self._to_mark.append((action.key, action.reply_to))
        self._sent.append(action.ref)
        return True

    def forward(self, action: Forward) -> None:
        """A copy of a request record to its proper bucket topic; its record here is done
        once the copy is acknowledged (a dispatcher that dies first forwards it again, and
        the ledger answers the request id once)."""
        self.writer.send(action.topic, action.value, key=action.key, headers=action.headers)
        self._sent.append(action.ref)

    def deliver(self) -> list[RecordRef]:
        """Flush; the records whose answers the broker acknowledged (none if it failed:
        they are tried again on the next call)."""
        if not self._sent and not self._to_mark:
            return []
        try:
            delivered = self.writer.flush()
        except DeliveryError as exc:
            log.warning("error replies not delivered yet (%s); trying again", exc)
            return []
        if self._to_mark:
            landed = {(d.topic, d.key): d for d in delivered}
            where = {
                key: ReplyAt(d.topic, d.partition, d.offset)
                for key, topic in self._to_mark
                if (d := landed.get((topic, key[1].encode()))) is not None
            }
            try:
                self.ledger.mark_answered([key for key, _ in self._to_mark], where)
                self._to_mark = []
            except REDIS_ERRORS:
                log.warning("answered marks wait for Redis", exc_info=True)
        done, self._sent = self._sent, []
        return done
