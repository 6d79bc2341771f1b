"""Answers the dispatcher gives itself: error replies (bad schema, expired deadline,
cancelled, redelivery exhausted, ...) and dead letters. A request is answered at most once:
each error reply first claims the request in the ledger, as a worker would."""

from __future__ import annotations

import logging

from headrace.schemas.errors import ErrorInfo
from headrace.schemas.messages import DeadLetter, RecordRef, Reply
from headrace.schemas.topics import Topics
from headrace.transport.kafka.delivery import ReliableProducer
from headrace.workers.flights import RequestKey
from headrace.workers.intake import Rejection
from headrace.workers.ledger import STATE_ERRORS, ClaimState, Ledger

log = logging.getLogger(__name__)

CLAIM_LEASE_MS = 60_000


class ErrorReplies:
    def __init__(
        self, producer: ReliableProducer, ledger: Ledger, topics: Topics, owner: str
    ) -> None:
        self.producer = producer
        self.ledger = ledger
        self.topics = topics
        self.owner = owner
        # answered here: their records are done once the producer has flushed ...
        self.answered: list[RecordRef] = []
        # ... and these request ids are then marked answered in the ledger
        self.to_mark: list[RequestKey] = []

    def reply(
        self,
        topic: str,
        request_id: str,
        key: RequestKey,
        model: str,
        error: ErrorInfo,
        ref: RecordRef,
    ) -> bool:
        """Answer with ``error`` unless this request was answered already. Returns False when a
        worker holds the request right now: the caller should queue it like any other."""
        try:
            state = self.ledger.claim([key], owner=self.owner, lease_ms=CLAIM_LEASE_MS)[0]
        except STATE_ERRORS:  # cannot check: answering twice beats never answering
            state = ClaimState.fresh
        if state is ClaimState.busy:
            return False
        if state is ClaimState.answered:
            self.answered.append(ref)  # a redelivered record: its reply exists
            return True
        reply = Reply(request_id=request_id, tenant=key[0], model=model, error=error)
        try:
            self.producer.send(topic, reply.model_dump_json().encode(), key=request_id.encode())
        except Exception:  # an unusable reply_to (bad topic name): the dead letter has it
            log.exception("could not send error reply to %r", topic)
        self.answered.append(ref)
        self.to_mark.append(key)
        return True

    def dead_letter(self, ref: RecordRef, error: ErrorInfo, original: str) -> None:
        letter = DeadLetter(source=ref, code=error.code, reason=error.message, original=original)
        self.producer.send(self.topics.dead_letter, letter.model_dump_json().encode())

    def reject(self, raw: bytes, ref: RecordRef, why: Rejection) -> None:
        """A record that is no request: dead-lettered, and answered with the error where it
        names a reply topic and a request id."""
        log.warning("dead letter %s:%d@%d: %s", ref.topic, ref.partition, ref.offset, why.message)
        info = ErrorInfo(code=why.code, message=why.message)
        self.dead_letter(ref, info, raw.decode("utf-8", errors="replace"))
        if why.reply_to is not None and why.request_id is not None:
            key = (why.tenant, why.request_id)
            if self.reply(why.reply_to, why.request_id, key, why.model, info, ref):
                return
        self.answered.append(ref)
