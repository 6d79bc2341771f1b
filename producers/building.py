"""Requests built from a caller's inputs, mixed into ``Client``: each input checked (before
it is tokenized where it cannot fit), counted with the model's tokenizer, given its
parameters, its cache directive and its bucket."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from headrace.models.registry import resolve
from headrace.models.tokenizer import tokenizer_of
from headrace.producers.inputs import (
    Given,
    asked_task,
    bounded,
    check_generation,
    checked_pairs,
    counted,
    token_ids,
)
from headrace.schemas.buckets import bucket_for
from headrace.schemas.errors import (
    InputTooLongError,
    InvalidRequestError,
    RequestTooLargeError,
    input_too_long,
)
from headrace.schemas.messages import SCORED, CacheDirective, Request
from headrace.schemas.params import EmbedParams, GenerateParams, Priority, ScoreParams
from headrace.schemas.wire import request_body

if TYPE_CHECKING:
    from headrace.cache.store import TieredCache
    from headrace.config.settings import Settings
    from headrace.producers.config import ClientConfig

# Envelope bytes a request's JSON adds to its text (ids, topic, times), generously rounded up.
ENVELOPE_BYTES = 2048


class RequestBuilding:
    """What ``Client`` builds requests with."""

    settings: Settings  # the model registry is read through it
    config: ClientConfig
    tenant: str
    reply_topic: str
    cache: TieredCache | None

    def prepare(
        self,
        texts: Sequence[Given],
        *,
        model: str | None = None,
        request_ids: Sequence[str] | None = None,
        truncate: bool = False,
        normalize: bool = True,
        timeout_s: float | None = None,
        tags: Sequence[str] = (),
        cache_class: str = "default",
        generation: GenerateParams | None = None,
        session_id: str | None = None,
        routing_key: str | None = None,
        vector_encoding: Literal["float", "base64"] = "float",
        priority: Priority = "default",
        pairs: Sequence[str | None] | None = None,
        semantic: bool = False,
    ) -> list[tuple[Request, int]]:
        """Validate and count ``texts``; returns each request with its bucket. Raises a
        ``InvalidRequestError`` subclass naming the first bad text. An embedding's input
        may be token ids of the model's tokenizer, embedded as given. ``generation``: the
        texts are prompts of a generation model (bucketed by prompt length).
        ``routing_key``: under a split sticky by key, requests with the same key are served
        by the same model version. A rerank or classify model scores each text, with its
        ``pairs`` entry where there is one (a rerank's query and document). ``semantic``: a
        generation that the semantic cache may answer (it carries a cache directive even
        when it would not repeat)."""
        model = model or self.config.model
        spec = resolve(self.settings, model)  # UnknownModelError
        task = asked_task(spec.task, generation is not None)
        if spec.task != task:
            raise InvalidRequestError(f"{model} serves {spec.task!r} requests, not {task!r}")
        if request_ids is not None and len(request_ids) != len(texts):
            raise ValueError("request_ids and texts differ in length")
        pairs = checked_pairs(pairs, len(texts), task)
        # a prompt leaves room for at least one generated token
        limit = min(spec.max_tokens - (generation is not None), self.config.buckets[-1])
        cut = generation.truncate if generation is not None else truncate
        tokenizer = tokenizer_of(spec, self.settings)
        given = token_ids(texts, tokenizer, model)
        if generation is not None and any(g is not None for g in given):
            raise InvalidRequestError("a prompt is text: token ids are an embedding's input")
        inputs = [
            "" if ids is not None else bounded(i, str(text), limit, cut, generation is not None)
            for i, (text, ids) in enumerate(zip(texts, given, strict=True))
        ]
        if generation is not None:
            check_generation(generation, tokenizer, spec)
        pairs = [
            None if p is None else bounded(i, p, limit, cut, keep_end=False)
            for i, p in enumerate(pairs)
        ]
        counts = counted(tokenizer, inputs, given, pairs)
        now = datetime.now(UTC)
        deadline = now + timedelta(seconds=timeout_s) if timeout_s is not None else None
        params: EmbedParams | GenerateParams | ScoreParams = generation or (
            ScoreParams(truncate=truncate)
            if task in SCORED
            else EmbedParams(truncate=truncate, normalize=normalize)
        )
        directive = None
        # a deterministic generation outside a conversation is cached like an embedding
        repeats = generation is None or (generation.deterministic() and session_id is None)
        if self.cache is not None and (repeats or (semantic and session_id is None)):
            if cache_class not in self.config.cache_classes:
                raise InvalidRequestError(
                    f"unknown cache class {cache_class!r}; known: "
                    + ", ".join(sorted(self.config.cache_classes))
                )
            directive = CacheDirective(entry_class=cache_class, tags=list(tags))
        out = []
        for i, (text, tokens) in enumerate(zip(inputs, counts, strict=True)):
            if tokens > limit:
                if not params.truncate:
                    raise InputTooLongError(
                        f"text {i} ({model}): " + input_too_long(tokens, limit).message
                    )
                tokens = limit
            request = Request(
                request_id=request_ids[i] if request_ids is not None else uuid.uuid4().hex,
                tenant=self.tenant,
                model=model,
                task=task,
                input=text,
                input_ids=given[i],
                input_pair=pairs[i],
                params=params,
                reply_to=self.reply_topic,
                deadline=deadline,
                created_at=now,
                token_count=tokens,
                cache=directive,
                session_id=session_id,
                routing_key=routing_key,
                vector_encoding=vector_encoding,
                priority=priority,
            )
            # a UTF-8 character takes at most 4 bytes (JSON escapes of controls, 6: rare); a
            # token id at most 11 (ten digits and a comma)
            most = len(text) * 6 + len(given[i] or ()) * 11 + ENVELOPE_BYTES
            if most > self.config.max_request_bytes:
                size = len(request_body(request))
                if size > self.config.max_request_bytes:
                    raise RequestTooLargeError(
                        f"text {i} makes a {size}-byte request; the limit is "
                        f"{self.config.max_request_bytes} (max_request_bytes)"
                    )
            out.append((request, bucket_for(tokens, self.config.buckets)))
        return out
