"""``Client``: submit texts, get futures of replies.

    with Client(Settings(), tenant="acme") as client:  # Settings() reads HEADRACE_*
        vectors = client.embed(["a sentence", "another one"])
        future = client.submit("one more")        # concurrent.futures.Future[Reply]
        reply = future.result(timeout=30)

Requests are checked before they are sent (empty, unknown model, too long without
``truncate=True``), counted with the model's tokenizer, and produced to the topic of their
length bucket, keyed by ``record_key`` (identical cacheable requests share a partition).
Replies arrive on the client's reply topic. ``embed``, ``rerank`` and ``classify``
(``producers.tasks``) and ``generate`` (``producers.generation``) are built on ``submit_many``.

With ``cache_enabled`` a request is first looked up in the result cache (L1 in this process,
L2 Redis, L3 S3): a hit is answered at once (``reply.cache_tier`` says which tier) and never
reaches a request topic; a miss asks the worker to write its result through, with the
request's ``tags`` and ``cache_class``. One ``submit_many`` looks each distinct request up
once, before sending any: copies of one text in a call are all sent, and the dispatcher
computes them once (in-flight coalescing, docs/cache.md).

At most ``client_max_pending`` requests await replies at once; past that ``send`` blocks up to
``client_block_timeout_s`` or raises ``BackpressureError`` at once (``client_on_full``). An
online request to a bucket past its backlog bound, or of a tenant over its limits, raises a
``LimitedError`` (``OverloadedError``, ``RateLimitedError``, ``QuotaExceededError``, with
``retry_after_s``) before it is produced (``headrace.limits.gate``).

Against a broker that may lose acknowledged records (tansu: the transport's
``guarantees``), a request still unanswered after
``client_resend_after_s`` is produced again, with the same request_id, to the topic of its
token count (at most ``client_max_resends`` times): the pipeline answers a request id once,
so a resend costs nothing when the first copy is merely slow, and recovers a request record
the broker lost. Apache Kafka with acks=all loses no acknowledged record: no resends there.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from types import TracebackType

import numpy as np
import numpy.typing as npt

from headrace.cache.requests import request_key, request_scopes, shared_key
from headrace.cache.store import open_cache
from headrace.config.settings import Settings
from headrace.connections import REDIS_ERRORS, redis_client
from headrace.consumers.replies import ReplyListener
from headrace.health.tracing import headers_of, submitting
from headrace.limits.gate import Gate
from headrace.models.registry import serving_version
from headrace.producers.building import RequestBuilding
from headrace.producers.cancelling import CancelMixin
from headrace.producers.config import ClientConfig
from headrace.producers.generation import GenerationMixin
from headrace.producers.inputs import Given
from headrace.producers.lookups import Lookups
from headrace.producers.resend import Resender, Unanswered
from headrace.producers.semantic import Embedder, Lookup, SemanticCache
from headrace.producers.submission import Submission
from headrace.producers.tasks import TaskMixin
from headrace.schemas.buckets import bucket_for
from headrace.schemas.errors import (
    BackpressureError,
)
from headrace.schemas.messages import Reply, Request
from headrace.schemas.signing import request_signature, tenant_key
from headrace.schemas.tenants import check_tenant
from headrace.schemas.topics import Lane, Topics
from headrace.schemas.wire import request_body
from headrace.transport import Transport, open_transport
from headrace.transport.guarantees import resend_after_s
from headrace.usage.meter import Totals, UsageMeter

log = logging.getLogger(__name__)


class Client(RequestBuilding, TaskMixin, GenerationMixin, CancelMixin):
    def __init__(
        self,
        settings: Settings,
        *,
        tenant: str = "default",
        reply_topic: str | None = None,
        listen: bool = True,
        transport: Transport | None = None,
        lane: Lane = "online",
        config: ClientConfig | None = None,
    ) -> None:
        """``listen``: False for a caller that reads its reply topic itself (bulk jobs): no
        reply listener and no resends; only ``send_nowait`` and ``cancel`` then.
        ``transport``: the broker client (``open_transport(settings)`` by default).
        ``lane``: ``bulk`` for work that may wait for online traffic (bulk jobs use it).
        ``settings`` is built by the caller (``Settings()`` reads the environment): the
        client itself reads none. The client's own policy is ``config``
        (``ClientConfig.of(settings)`` by default); ``settings`` opens its connections."""
        self.settings = settings
        self.config = config or ClientConfig.of(settings)
        self.tenant = check_tenant(tenant)  # TenantNameError before anything connects
        # its signing key, where the tenant has one: its requests and cancellations are signed
        self._key = tenant_key(self.config.tenant_keys_dir, self.tenant)
        self.lane: Lane = lane
        self.topics = Topics(self.config.topic_prefix)
        self.reply_topic = reply_topic or self.topics.replies("default")
        self.transport = transport or open_transport(self.settings)
        request_topics = [self.topics.requests(b, lane) for b in self.config.buckets]
        self.transport.ensure_topics(request_topics)
        self.transport.ensure_topics([self.reply_topic, self.topics.control], partitions=1)
        self._slots = threading.BoundedSemaphore(self.config.max_pending)
        self._producer = self.transport.writer(self.config.delivery_timeout_s)
        # every bucket's topic (and where cancels go) learnt now, in one go: one by one, the
        # first record to each waited for a metadata answer of its own (0.1 s a topic)
        self._producer.track([*request_topics, self.topics.control])
        self._listener = ReplyListener(self.transport, self.reply_topic).start() if listen else None
        self._produce_lock = threading.Lock()  # the producer is shared with the resender
        # against a broker that may lose an acknowledged request: sent again if unanswered
        after_s = resend_after_s(self.config.resend_after_s, self.transport.guarantees)
        self._resender = (
            Resender(after_s, self.config.max_resends, self._resend, self.flush)
            if listen and after_s is not None
            else None
        )
        # online requests to a bucket past its backlog bound, or of a tenant over its limits,
        # are refused before they are produced (LimitedError)
        self._gate = Gate(redis_client(self.settings, timeout_s=0.5), self.settings)
        self.cache = open_cache(self.settings).listen() if self.config.cache_enabled else None
        # cache hits count in the tenant's usage (a hit costs no device time)
        self._usage = (
            UsageMeter(self.cache.l2.redis, self.config.topic_prefix) if self.cache else None
        )
        self.semantic = (
            SemanticCache(self.settings, self.cache, Embedder(self.settings))
            if self.cache is not None and self.config.semantic_cache
            else None
        )
        self._owner = True  # False in a tenant view: its connections are this client's
        self._views: dict[str, Client] = {}
        self._views_lock = threading.Lock()

    def for_tenant(self, tenant: str) -> Client:
        """This client for ``tenant``: the same producer, reply listener, resender, gate and
        cache (one of each per process, whatever the number of tenants), with the tenant's
        own name, signing key and ``client_max_pending`` slots (one tenant at its cap does
        not hold another's calls). Made once per tenant; closing a view closes nothing."""
        if tenant == self.tenant:
            return self
        with self._views_lock:
            view = self._views.get(tenant)
            if view is None:
                view = copy.copy(self)  # shallow: shares every connection
                view.tenant = check_tenant(tenant)
                view._key = tenant_key(self.config.tenant_keys_dir, view.tenant)
                view._slots = threading.BoundedSemaphore(self.config.max_pending)
                view._owner = False
                self._views[tenant] = view
            return view

    def _count_hit(self, tenant: str) -> None:
        if self._usage is None:
            return
        try:
            self._usage.add({tenant: Totals(cache_hits=1)})
        except REDIS_ERRORS:  # usage is accounting: it never fails a request
            log.debug("cache hit not counted: Redis unreachable", exc_info=True)

    # --- sending ---------------------------------------------------------------------------------
    def send(self, request: Request, bucket: int, *, semantic: bool = False) -> Submission:
        """Produce a prepared request (no checks) and return its submission; a cache hit is
        answered at once and not produced. ``semantic``: a generation the semantic cache
        may answer (``producers.semantic``), if its tenant opted in too."""
        return self._send(request, bucket, semantic, Lookups())

    def _send(
        self, request: Request, bucket: int, semantic: bool, looked_up: Lookups
    ) -> Submission:
        """``send``, with the cache lookups of the call it belongs to (``submit_many``)."""
        remember: Lookup | None = None
        if self.cache is not None and request.cache is not None:
            version = serving_version(self.settings, request)
            hit = looked_up.hit(self.cache, request_key(request, version))
            if hit is not None:
                return self._answered_from_cache(
                    request,
                    bucket,
                    Reply(
                        request_id=request.request_id,
                        tenant=request.tenant,
                        model=request.model,
                        result=hit.entry.result,
                        cache_tier=hit.tier,
                        model_version=version,
                    ),
                )
            if semantic and self.semantic is not None and self.semantic.allows(request.tenant):
                remember = self.semantic.lookup(request, version)
                if remember.reply is not None:
                    return self._answered_from_cache(request, bucket, remember.reply)
            generations = looked_up.generations(self.cache, request_scopes(request, version))
            directive = None
            if generations is not None:  # else Redis is away: the result is not written
                directive = request.cache.model_copy(update={"generations": generations})
            request = request.model_copy(update={"cache": directive})
        if self._listener is None:
            raise RuntimeError("this client does not listen for replies: use send_nowait")
        request = self._signed(request)
        lane = self._lane_of(request)
        self._gate.check(
            request.tenant,
            bucket,
            request.token_count or 0,
            lane,
            sheddable=request.priority == "sheddable",
        )
        self._take_slot()
        key = (request.tenant, request.request_id)
        future = self._listener.expect(*key)
        topic = self.topics.requests(bucket, lane)
        entry = Unanswered(request, time.monotonic())
        if self._resender is not None:  # before the reply can come
            self._resender.sent(key, entry)
        future.add_done_callback(lambda _: self._answered(key))
        if remember is not None and remember.vector is not None:
            self._remember_answer(future, request, version, remember.vector)
        entry.traceparent = self._produce(topic, request)
        return Submission(request=request, bucket=bucket, future=future)

    def _answered_from_cache(self, request: Request, bucket: int, reply: Reply) -> Submission:
        self._count_hit(request.tenant)
        answered: Future[Reply] = Future()
        answered.set_result(reply)
        return Submission(request=request, bucket=bucket, future=answered)

    def _remember_answer(
        self,
        future: Future[Reply],
        request: Request,
        version: str,
        vector: npt.NDArray[np.float32],
    ) -> None:
        """Once ``request`` is answered, its answer serves near prompts (semantic cache)."""
        semantic = self.semantic
        assert semantic is not None

        def done(answered: Future[Reply]) -> None:
            if answered.cancelled() or answered.exception() is not None:
                return
            reply = answered.result()
            semantic.remember(request, version, vector, reply)

        future.add_done_callback(done)

    @property
    def resent(self) -> int:
        """Requests produced again (against tansu: see ``producers.resend``)."""
        return self._resender.resent if self._resender is not None else 0

    def _resend(self, u: Unanswered) -> None:
        """To the bucket its token count names (where the dispatcher reads it), its lane."""
        bucket = bucket_for(u.request.token_count or 0, self.config.buckets)
        lane = self._lane_of(u.request)
        self._produce(self.topics.requests(bucket, lane), u.request, u.traceparent)

    def _lane_of(self, request: Request) -> Lane:
        """A ``batch`` request rides the bulk lane whatever this client's lane."""
        return "bulk" if request.priority == "batch" else self.lane

    def send_nowait(self, request: Request, bucket: int) -> None:
        """Produce a prepared request whose reply the caller reads from its reply topic
        itself (no future, no cache lookup, no resend); ``flush`` makes it durable."""
        request = self._signed(request)
        self._produce(self.topics.requests(bucket, self._lane_of(request)), request)

    def _signed(self, request: Request) -> Request:
        """Signed with this tenant's key, if it has one, as it is produced (the whole record:
        after the cache directive is set)."""
        if self._key is None or request.tenant != self.tenant:
            return request
        signature = request_signature(self._key, request.signable())
        return request.model_copy(update={"signature": signature})

    def _answered(self, key: tuple[str, str]) -> None:
        self._slots.release()
        if self._resender is not None:
            self._resender.answered(key)

    def _produce(self, topic: str, request: Request, traceparent: str | None = None) -> str | None:
        """Produce ``request`` with its trace context as a ``traceparent`` header: a new
        ``headrace.submit`` span, or ``traceparent`` (a resend). Returns the traceparent."""
        if traceparent is None:
            with submitting(request.tenant, request.request_id, topic) as traceparent:
                self._send_record(topic, request, traceparent)
        else:
            self._send_record(topic, request, traceparent)
        return traceparent

    def _send_record(self, topic: str, request: Request, traceparent: str | None) -> None:
        with self._produce_lock:
            self._producer.send(
                topic,
                request_body(request),
                key=record_key(request),
                headers=headers_of(traceparent),
            )

    def flush(self) -> None:
        """Block until everything sent is acknowledged by the broker (DeliveryError if not)."""
        with self._produce_lock:
            self._producer.flush()

    def submit_many(self, texts: Sequence[Given], **options: object) -> list[Submission]:
        prepared = self.prepare(texts, **options)  # type: ignore[arg-type]
        # each distinct request is looked up once, before any is sent: identical texts in one
        # call all go to the pipeline, which computes them once (in-flight coalescing)
        looked_up = Lookups()
        submissions = [self._send(r, bucket, False, looked_up) for r, bucket in prepared]
        self.flush()
        return submissions

    def submit(self, text: str, *, request_id: str | None = None, **options: object) -> Submission:
        ids = [request_id] if request_id is not None else None
        return self.submit_many([text], request_ids=ids, **options)[0]

    def _take_slot(self) -> None:
        c = self.config
        blocking = c.on_full == "block"
        if self._slots.acquire(blocking=blocking, timeout=c.block_timeout_s if blocking else None):
            return
        raise BackpressureError(
            f"{c.max_pending} requests await replies (client_max_pending)"
            + (f"; none answered within {c.block_timeout_s}s" if blocking else "")
        )

    # --- lifecycle -------------------------------------------------------------------------------
    @property
    def duplicate_replies(self) -> int:
        return self._listener.duplicates if self._listener is not None else 0

    @property
    def replies_read(self) -> int:
        """Reply records this client's listener parsed (shared by its tenant views)."""
        return self._listener.read if self._listener is not None else 0

    @property
    def pending(self) -> int:
        """Requests sent by this client still awaiting their reply."""
        return self._listener.pending() if self._listener is not None else 0

    def close(self) -> None:
        if not self._owner:  # a tenant view: the client it came from owns the connections
            return
        if self._resender is not None:
            self._resender.close()
        self._producer.close()
        self._gate.close()
        if self._listener is not None:
            self._listener.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def record_key(request: Request) -> bytes:
    """A request record's key, which picks its partition: its ``shared_key`` where it has
    one, so identical requests meet in one partition, read by one dispatcher, and are
    computed once (``coalescing``); else its id."""
    return (shared_key(request) or request.request_id).encode()
