"""OpenAI's completion and chat-completion response bodies: each choice's text, or the
tools it called, its log probabilities in the endpoint's shape, and the usage of all
choices (the prompt counted once)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from headrace.jobs.openai_tools import tool_calls_of
from headrace.schemas.logprobs import TokenLogprob
from headrace.schemas.messages import GenerationResult


def usage_of(result: GenerationResult) -> dict[str, int]:
    return usage_of_all([result])


def usage_of_all(results: Sequence[GenerationResult]) -> dict[str, int]:
    """The usage of ``n`` choices of one prompt: the prompt once, every choice's tokens."""
    prompt = results[0].usage.prompt_tokens
    completion = sum(r.usage.completion_tokens for r in results)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def generation_body(
    request_id: str,
    model: str,
    result: GenerationResult | Sequence[GenerationResult],
    *,
    chat: bool,
) -> dict[str, Any]:
    """The response body of a completion (``text_completion``) or a chat completion; one
    choice per result, in order (``n``)."""
    results = [result] if isinstance(result, GenerationResult) else list(result)
    head = {"created": int(time.time()), "model": model, "usage": usage_of_all(results)}
    if chat:
        choices: list[dict[str, Any]] = [
            {
                "index": i,
                "message": chat_message(
                    request_id if len(results) == 1 else f"{request_id}-{i}", r
                ),
                "logprobs": chat_logprobs(r.logprobs),
                "finish_reason": r.finish_reason,
            }
            for i, r in enumerate(results)
        ]
        return {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            **head,
            "choices": choices,
        }
    choices = [
        {
            "text": r.text,
            "index": i,
            "logprobs": completion_logprobs(r.logprobs),
            "finish_reason": r.finish_reason,
        }
        for i, r in enumerate(results)
    ]
    return {"id": f"cmpl-{request_id}", "object": "text_completion", **head, "choices": choices}


def chat_message(request_id: str, result: GenerationResult) -> dict[str, Any]:
    """A chat answer's message: its text, or the tools it called (content null)."""
    calls = tool_calls_of(request_id, result)
    if calls is not None:
        return {"role": "assistant", "content": None, "tool_calls": calls}
    return {"role": "assistant", "content": result.text}


def chat_logprobs(logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
    """OpenAI's chat ``logprobs``: ``content``, one entry per token."""
    if logprobs is None:
        return None
    return {"content": [lp.model_dump() for lp in logprobs], "refusal": None}


def completion_logprobs(logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
    """OpenAI's legacy completions ``logprobs``: parallel lists, the alternatives as
    token -> logprob maps, and each token's character offset in the text."""
    if logprobs is None:
        return None
    offsets, at = [], 0
    for lp in logprobs:
        offsets.append(at)
        at += len(lp.token)
    return {
        "tokens": [lp.token for lp in logprobs],
        "token_logprobs": [lp.logprob for lp in logprobs],
        "top_logprobs": [{t.token: t.logprob for t in lp.top_logprobs} for lp in logprobs],
        "text_offset": offsets,
    }
