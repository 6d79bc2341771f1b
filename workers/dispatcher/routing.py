"""Where a request goes by the tokens the dispatcher counted itself: part of the core, no IO.

A producer's ``token_count`` is a hint. The dispatcher counts every request with the
model's tokenizer; a request longer than its topic's bucket goes on to its proper bucket
topic, one on the unbucketed topic (``<prefix>.requests``) to the bucket its count picks,
one past the largest bucket (or the model's limit) without ``truncate`` is answered
``input_too_long``. A request shorter than its bucket stays where it is: its batch costs
what its real count says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from headrace.schemas.buckets import bucket_for
from headrace.schemas.errors import ErrorInfo, input_too_long
from headrace.schemas.messages import Request
from headrace.schemas.params import GenerateParams

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
