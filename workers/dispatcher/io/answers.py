"""The dispatcher's own answers, carried out: error replies, the degradation ladder's
answers (cached or canned results), dead letters, and requests forwarded to their proper
bucket.

A request is answered at most once: an error reply first claims the request in the ledger,
as a worker would. A request a worker holds right now is left to it when the answer may be
deferred. The records answered here are done only once the broker has acknowledged what
was sent for them (``deliver``), and their request ids are then marked answered.

No record stops the dispatcher: a send the broker refuses for good (a record past the size
limit, a topic name it rejects) is logged and dead-lettered instead (a dead letter that is
itself refused goes again without the record's bytes); a send that may succeed later (a
timeout, no leader yet) leaves its record undone and is tried again on the next
``deliver``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from headrace.connections import REDIS_ERRORS
from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import RecordRef, Reply
from headrace.schemas.topics import Topics
from headrace.transport.base import DeliveryError, Headers, TransportError, Writer
from headrace.workers.dispatcher.events import Answer, Forward, RequestKey
from headrace.workers.ledger import ClaimState, Ledger, ReplyAt

log = logging.getLogger(__name__)

CLAIM_LEASE_MS = 60_000
SEND_TRIES = 3  # an error reply failing for now this often is given up


class Answerer:
    def __init__(
        self,
        writer: Writer,
        ledger: Ledger,
        topics: Topics,
        owner: str,
        topic_exists: Callable[[str], bool] = lambda _: True,
    ) -> None:
        """``topic_exists``: whether a reply topic exists (``KnownTopics.exists``): a reply
        to one that does not is not sent (a send would wait for its metadata)."""
        self.writer = writer
        self.ledger = ledger
        self.topics = topics
        self.owner = owner
        self.topic_exists = topic_exists
        self._sent: list[RecordRef] = []  # done once the writer has flushed ...
        # ... and these are then marked answered, with where their replies landed
        self._to_mark: list[tuple[RequestKey, str]] = []
        # a send failed for now: tried again (with how many tries it had)
        self._again: list[tuple[Answer | Forward, int]] = []
        self.refused = 0  # sends refused for good (logged; the dead letter has the record)
        writer.track([topics.dead_letter])

    def expect(self, actions: Iterable[object]) -> None:
        """The topics a pass's answers and forwards go to, named to the writer at once: a
        first record to each waited for a metadata refresh of its own (100 ms apart with
        kafka-python), the dispatcher's loop stalled meanwhile."""
        topics: dict[str, None] = {}
        for action in actions:
            if isinstance(action, Answer) and action.reply_to is not None:
                if self.topic_exists(action.reply_to):
                    topics[action.reply_to] = None
            elif isinstance(action, Forward):
                topics[action.topic] = None
        if topics:
            self.writer.track(topics)

    @property
    def pending(self) -> bool:
        return bool(self._sent or self._to_mark or self._again)

    def answer(self, action: Answer, tries: int = 0) -> bool:
        """Send what ``action`` asks; False when it was deferred to the worker holding the
        request (nothing sent). ``tries``: how often it failed for now before."""
        state = ClaimState.fresh
        if action.key is not None and action.reply_to is not None:
            try:
                state = self.ledger.claim([action.key], self.owner, CLAIM_LEASE_MS)[0]
            except REDIS_ERRORS:  # cannot check: answering twice beats never answering
                state = ClaimState.fresh
        if state is ClaimState.busy and action.may_defer:
            return False
        try:
            if action.dead_letter is not None:
                self._dead_letter(action.dead_letter)
                action = replace(action, dead_letter=None)  # not again if the reply waits
            if state in (ClaimState.fresh, ClaimState.cancelled) and action.reply_to is not None:
                self._reply(action)
        except _Later:
            self._later(action, tries)
            return True
        self._sent.append(action.ref)
        return True

    def forward(self, action: Forward, tries: int = 0) -> None:
        """A copy of a request record to its proper bucket topic; its record here is done
        once the copy is acknowledged (a dispatcher that dies first forwards it again, and
        the ledger answers the request id once). A copy the broker refuses for good is
        dead-lettered."""
        try:
            if self._send(action.topic, action.value, action.key, action.headers):
                self._sent.append(action.ref)
                return
        except _Later:
            self._later(action, tries)
            return
        letter = DeadLetter.of(
            action.value,
            source=action.ref,
            code=ErrorCode.request_too_large,
            reason=f"could not be forwarded to {action.topic}",
        )
        self.answer(Answer(ref=action.ref, error=None, dead_letter=letter))

    def deliver(self) -> list[RecordRef]:
        """Send again what failed for now, then flush; the records whose answers the broker
        acknowledged (none if it failed: they are tried again on the next call)."""
        again, self._again = self._again, []
        for action, tries in again:
            if isinstance(action, Forward):
                self.forward(action, tries)
            else:
                self.answer(replace(action, may_defer=False), tries)
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

    def _later(self, action: Answer | Forward, tries: int) -> None:
        """Try ``action`` again on the next ``deliver``; after ``SEND_TRIES`` an error reply
        is given up (the dead letter, sent first, has its record; the client's resend asks
        again), while a forward or a dead letter is tried for as long as it takes."""
        tries += 1
        if isinstance(action, Answer) and action.dead_letter is None and tries >= SEND_TRIES:
            log.error("error reply to %r given up after %d tries", action.reply_to, tries)
            self.refused += 1
            self._sent.append(action.ref)
            return
        self._again.append((action, tries))

    # --- sends ----------------------------------------------------------------------------
    def _reply(self, action: Answer) -> None:
        assert action.key is not None and action.reply_to is not None
        if not self.topic_exists(action.reply_to):
            log.warning("no reply topic %r: error reply not sent", action.reply_to)
            self.refused += 1
            return
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
        value = reply.model_dump_json().encode()
        if self._send(action.reply_to, value, request_id.encode()):
            self._to_mark.append((action.key, action.reply_to))

    def _dead_letter(self, letter: DeadLetter) -> None:
        topic = self.topics.dead_letter
        if self._send(topic, letter.model_dump_json().encode()):
            return
        bare = letter.model_copy(update={"original": "", "original_truncated": True})
        if not self._send(topic, bare.model_dump_json().encode()):
            log.error("dead letter for %s refused even without its record", letter.source)

    def _send(
        self, topic: str, value: bytes, key: bytes | None = None, headers: Headers = ()
    ) -> bool:
        """Send one record: True if it went, False if the broker (or its client) refused
        it for good; raises ``_Later`` when it may go later."""
        try:
            self.writer.send(topic, value, key=key, headers=headers)
        except TransportError as exc:
            if exc.retriable:
                log.warning("send to %r failed for now (%s); trying again", topic, exc)
                raise _Later from exc
            self._refused(topic, len(value), exc)
            return False
        except Exception as exc:  # the client refused it before the broker saw it
            self._refused(topic, len(value), exc)
            return False
        return True

    def _refused(self, topic: str, size: int, exc: BaseException) -> None:
        self.refused += 1
        log.warning("send of %d bytes to %r refused: %r", size, topic, exc)


class _Later(Exception):
    """A send failed in a way that may pass: the action is tried again."""
