"""A generation row's result as the wire carries it: its text, finish reason, usage and log
probabilities (each token named by the backend), and the sampling parameters a row runs
with (a seed of its own when it asked for none)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import cast

from headrace.schemas.logprobs import TokenLogprob, TopLogprob
from headrace.schemas.messages import GenerationResult, Request, Usage
from headrace.schemas.params import GenerateParams
from headrace.schemas.tool_calls import read_calls
from headrace.workers.backends.base import EncodedItem, Generated, Logprob

Pieces = Callable[[list[int]], list[tuple[str, list[int]]]]  # token ids -> (text, bytes)


def token_namer(backend: object) -> Pieces:
    """The backend's ``token_pieces`` (each token's text and bytes, for log probabilities)."""
    named = getattr(backend, "token_pieces", None)
    if named is None:

        def unnamed(ids: list[int]) -> list[tuple[str, list[int]]]:
            raise TypeError(f"{type(backend).__name__} cannot name its tokens (logprobs)")

        return unnamed
    return cast(Pieces, named)


def generation_result(
    enc: EncodedItem, out: Generated, params: GenerateParams, pieces: Pieces
) -> GenerationResult:
    """A row's result; a row asked for tool calls whose text is whole calls ends
    ``tool_calls``, as OpenAI's does."""
    fmt = params.response_format
    calls = fmt is not None and fmt.type == "tool_calls" and read_calls(out.text) is not None
    return GenerationResult(
        text=out.text,
        finish_reason="tool_calls" if calls and out.finish_reason == "stop" else out.finish_reason,
        usage=Usage(prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens),
        truncated=enc.truncated,
        logprobs=wire_logprobs(out.logprobs, pieces) if out.logprobs is not None else None,
    )


def wire_logprobs(logprobs: list[Logprob], pieces: Pieces) -> list[TokenLogprob]:
    """A row's log probabilities with each token's text and bytes (``token_pieces`` of the
    backend, asked once for every id the row's tokens and alternatives name)."""
    ids = sorted({lp.token_id for lp in logprobs} | {t for lp in logprobs for t, _ in lp.top})
    named = dict(zip(ids, pieces(ids) if ids else [], strict=True))

    def top(token_id: int, logprob: float) -> TopLogprob:
        text, raw = named[token_id]
        return TopLogprob(token=text, logprob=logprob, bytes=raw)

    return [
        TokenLogprob(
            **top(lp.token_id, lp.logprob).model_dump(),
            top_logprobs=[top(t, v) for t, v in lp.top],
        )
        for lp in logprobs
    ]


def sampling_params(request: Request) -> GenerateParams:
    params = cast(GenerateParams, request.params)
    if params.seed is not None:
        return params
    digest = hashlib.sha256(f"{request.tenant}/{request.request_id}".encode()).digest()
    return params.model_copy(update={"seed": int.from_bytes(digest[:8], "big") >> 1})
