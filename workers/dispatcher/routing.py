"""Where a request goes by the tokens the dispatcher counted itself: part of the core, no IO.

A producer's ``token_count`` is a hint. The dispatcher counts every request with the
model's tokenizer; a request longer than its topic's bucket goes on to its proper bucket
topic, one on the unbucketed topic (``<prefix>.requests``) to the bucket its count picks,
one past the largest bucket (or the model's limit) without ``truncate`` is answered
``input_too_long``. A request shorter than its bucket stays where it is: its batch costs
what its real count says. A poll's requests are counted together (``count_requests``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from headrace.schemas.buckets import bucket_for
from headrace.schemas.errors import ErrorCode, ErrorInfo, input_too_long
from headrace.schemas.messages import Request
from headrace.schemas.params import GenerateParams
from headrace.workers.dispatcher.intake import Rejection

log = logging.getLogger(__name__)

TokenCounter = Callable[[Sequence[str]], list[int]]  # texts -> tokens each, specials included


@dataclass(frozen=True)
class Here:
    """Batch it in this topic's bucket; ``tokens`` is its cost in the batch budget."""

    tokens: int


@dataclass(frozen=True)
class Onward:
    """Forward it, as it is, to this bucket's topic."""

    bucket: int


Route = Here | Onward | ErrorInfo


def route(
    request: Request, counted: int, here: int | None, buckets: Sequence[int], max_tokens: int
) -> Route:
    """``here``: the bucket of the topic it was read from (None: the unbucketed topic);
    ``max_tokens``: the model's limit."""
    generate = isinstance(request.params, GenerateParams)
    limit = min(max_tokens - generate, buckets[-1])  # a prompt leaves room for one token
    tokens = counted
    if tokens > limit:
        if not request.params.truncate:
            return input_too_long(counted, limit)
        tokens = limit
    proper = bucket_for(tokens, buckets)
    if here is None or proper > here:
        return Onward(proper)
    if isinstance(request.params, GenerateParams):  # its KV cache grows as it generates
        tokens += request.params.max_tokens
    return Here(tokens)


def count_requests(count_tokens: TokenCounter, parsed: list[Request | Rejection]) -> list[int]:
    """Each request's tokens (0 for a rejection), counted together (calls of a partition's
    20-odd records each cost about 13% more a text); if that raises, one at a time, and a
    request whose count raises becomes a rejection in ``parsed``. An input given as token
    ids counts them and the special tokens of an empty text; a pair, its two texts' counts
    (at most a token over the pair's own: BERT's shares its [CLS])."""
    requests = [p for p in parsed if isinstance(p, Request)]
    try:
        if all(p.input_pair is None and p.input_ids is None for p in requests):  # most polls
            counted = iter(count_tokens([p.input for p in requests]) if requests else [])
            return [next(counted) if isinstance(p, Request) else 0 for p in parsed]
        texts = [t for p in requests for t in _texts(p)]
        counted = iter(count_tokens(texts) if texts else [])
        own = iter([sum(next(counted) for _ in _texts(p)) + _given(p) for p in requests])
        return [next(own) if isinstance(p, Request) else 0 for p in parsed]
    except Exception:
        log.warning("counting %d requests together failed; one at a time", len(requests))
    counts = []
    for k, p in enumerate(parsed):
        if not isinstance(p, Request):
            counts.append(0)
            continue
        try:
            counts.append(sum(count_tokens(_texts(p))) + _given(p))
        except Exception as exc:
            message = f"its input could not be tokenized: {type(exc).__name__}"
            parsed[k] = Rejection(
                ErrorCode.invalid_schema, message, p.reply_to, p.request_id, p.tenant, p.model
            )
            counts.append(0)
    return counts


def _texts(request: Request) -> list[str]:
    """The texts a request's tokens are counted from: its input, and its pair's second."""
    return [request.input] if request.input_pair is None else [request.input, request.input_pair]


def _given(request: Request) -> int:
    """The token ids a request gives as its input (none: 0)."""
    return len(request.input_ids) if request.input_ids is not None else 0
