"""What decoding keeps per sequence (``DecodeRow``: its tokens, the text streamed so far,
its grammar and log probabilities, why it ended), how prompts become token ids
(``encode_prompts``), and how ids become text (``detokenizer``). Shared by the static and
continuous decoders and the vLLM adapter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headrace.workers.backends.base import EncodedItem, FinishReason, Logprob, Sampling


class DecodeRow:
    """One sequence's decoding state: its tokens, the text streamed so far, why it ended.
    ``watched``: its text is needed at every token (it streams, or has stop sequences to
    look for); otherwise it is decoded once, when the row ends."""

    def __init__(
        self,
        params: Sampling,
        prompt_tokens: int,
        seed: int,
        text_of: Callable[[list[int]], str],
        streams: bool,
        matcher: Any = None,
    ) -> None:
        self.params = params
        self.matcher = matcher  # its structured output's grammar state (``grammar``), or None
        self.text_of = text_of
        self.watched = streams or bool(params.stop)
        self.prompt_tokens = prompt_tokens
        self.seed = seed  # its sampling noise is drawn from (seed, step)
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0  # characters of text already given out as deltas
        self.finish: FinishReason | None = None
        self.hold = max((len(s) for s in params.stop), default=1) - 1
        self.device_s = 0.0  # its share of the forward passes it was in (the cost it is charged)
        # each token's log probability, where asked for (``GenerateParams.logprobs``)
        self.logprobs: list[Logprob] | None = [] if params.logprobs is not None else None

    def end(self, reason: FinishReason) -> None:
        self.finish = reason
        if not self.watched:
            self.text = self.text_of(self.ids)

    def pending_delta(self) -> str:
        """New text safe to give out: all of it once finished, else all but what could be
        the start of a stop sequence."""
        if self.finish:
            end = len(self.text)
        else:  # nor a character still being decoded (a partial UTF-8 sequence shows as U+FFFD)
            end = min(len(self.text) - self.hold, len(self.text.rstrip("\ufffd")))
        if end <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent : end], end
        return delta


def encode_prompts(
    tokenizer: Any, context: int, texts: list[str], truncate: list[bool]
) -> list[EncodedItem]:
    """Prompt token ids; past the context (less one token to generate) the start is cut
    where asked (the end of a prompt matters most), else the item is too long."""
    limit = context - 1
    items = []
    for ids, cut in zip(tokenizer(texts)["input_ids"], truncate, strict=True):
        if len(ids) <= limit:
            items.append(EncodedItem(ids=ids, token_count=len(ids)))
        elif cut:
            items.append(EncodedItem(ids=ids[-limit:], token_count=limit, truncated=True))
        else:
            items.append(EncodedItem(ids=[], token_count=len(ids), too_long=True))
    return items


def detokenizer(tokenizer: Any) -> Callable[[list[int]], str]:
    """The tokenizer's ``decode(ids, skip_special_tokens=True)``, straight from its Rust
    backend where it has one and no clean-up of spaces applies (a row is decoded again at
    every token: transformers' Python wrapper costs more than the decoding)."""
    fast = getattr(tokenizer, "backend_tokenizer", None)
    if fast is not None and getattr(tokenizer, "clean_up_tokenization_spaces", True) is False:
        return lambda ids: str(fast.decode(ids, skip_special_tokens=True))
    return lambda ids: str(tokenizer.decode(ids, skip_special_tokens=True))
