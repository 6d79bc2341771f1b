"""Whether a parsed request is one of this pipeline's, for the dispatcher's core (no IO):
its reply topic is one of the pipeline's and exists, its tenant's signature is on it where
the tenant signs, and it is no replay. A request that is not is dead-lettered, unanswered
where the reply would go to a topic it does not own."""

from __future__ import annotations

from collections.abc import Callable

from cachetools import LRUCache

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Request
from headrace.schemas.signing import Keys, request_signature, signed_by
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.intake import Rejection

REPLY_TOPICS_REMEMBERED = 10_000


class Screen:
    def __init__(
        self, config: CoreConfig, reply_topic_exists: Callable[[str], bool] = lambda _: True
    ) -> None:
        """``reply_topic_exists``: the shell's lookup of a topic's name."""
        self.topics = config.topics
        self.answered_ttl_s = config.answered_ttl_s
        self.tenant_keys: Keys = config.tenant_keys  # replaced when the key folder changes
        self.reply_topic_exists = reply_topic_exists
        # a topic's name is checked once: a handful of reply topics name every request
        self._reply_topic: LRUCache[str, bool] = LRUCache(maxsize=REPLY_TOPICS_REMEMBERED)

    def unfit(self, request: Request, wall_time: float) -> Rejection | None:
        """Why ``request`` is no request of this pipeline's, if it is not: a reply topic not
        the pipeline's or not there, a signature missing, a replay."""
        if not self._is_reply_topic(request.reply_to):
            message = f"reply_to {request.reply_to!r} is not a reply topic of this pipeline"
            return Rejection(ErrorCode.invalid_schema, message, tenant=request.tenant)
        if not self._signed(request):
            # dead-lettered only: no reply, no claim (a forgery may name a victim's request)
            message = f"tenant {request.tenant!r} signs its requests; this one is not signed by it"
            return Rejection(ErrorCode.unauthenticated, message, tenant=request.tenant)
        if self._replayed(request, wall_time):
            message = (
                f"a signed request created {request.created_at.isoformat()}, longer ago than "
                f"answered ids are remembered ({self.answered_ttl_s:g}s): a replay"
            )
            return Rejection(ErrorCode.unauthenticated, message, tenant=request.tenant)
        if not self.reply_topic_exists(request.reply_to):
            message = f"reply_to {request.reply_to!r} does not exist (its client creates it)"
            return Rejection(ErrorCode.invalid_schema, message, tenant=request.tenant)
        return None

    def _is_reply_topic(self, topic: str) -> bool:
        known = self._reply_topic.get(topic)
        if known is None:
            known = self._reply_topic[topic] = self.topics.is_reply_topic(topic)
        return known

    def _signed(self, request: Request) -> bool:
        """Whether ``request`` carries its tenant's signature (true for a tenant with no
        key)."""
        return signed_by(
            self.tenant_keys,
            request.tenant,
            request.signature,
            lambda key: request_signature(key, request.signable()),
        )

    def _replayed(self, request: Request, wall_time: float) -> bool:
        """A signed request from before the ledger's memory of answered ids: its id may have
        been answered and forgotten, so it is refused rather than answered (and appended to
        its session) again."""
        signs = bool(self.tenant_keys.get(request.tenant))
        return signs and wall_time - request.created_at.timestamp() > self.answered_ttl_s
