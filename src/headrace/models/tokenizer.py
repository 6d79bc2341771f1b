"""A model's own fast tokenizer: loading it, and counting tokens the way the model sees
them (the client buckets by this count; the encoder backends encode with it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer


def load_tokenizer(model_dir: Path) -> Tokenizer:
    """``tokenizer.json`` of a model folder, with no truncation and no padding (callers cut
    and pad themselves)."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@cache
def tokenizer_for(model: str) -> Tokenizer:
    # imported here: the registry needs pydantic, which a backend on a bare GPU machine
    # (scripts/gpu_check.py) may not have
    from headrace.models.registry import model_spec

    return load_tokenizer(model_spec(model).path)


def count_tokens(model: str, texts: list[str]) -> list[int]:
    """Tokens per text, special tokens included (what the model will see). Without offsets
    (``encode_batch_fast``, tokenizers >= 0.21): counting needs none."""
    tokenizer = tokenizer_for(model)
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    return [len(e.ids) for e in encode(texts)]


def token_counter(model: str) -> Callable[[Sequence[str]], list[int]]:
    """Counts texts' tokens with ``model``'s tokenizer, loaded on first use (a model this
    process does not know counts nothing: its requests are answered unknown_model)."""

    from headrace.schemas.errors import UnknownModelError

    def count(texts: Sequence[str]) -> list[int]:
        try:
            return count_tokens(model, list(texts))
        except UnknownModelError:
            return [0] * len(texts)

    return count
