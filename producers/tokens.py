"""Token counting at the producer, with the model's own tokenizer."""

from __future__ import annotations

from functools import cache

from tokenizers import Tokenizer

from headrace.models.registry import model_spec


@cache
def tokenizer_for(model: str) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(model_spec(model).path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(model: str, texts: list[str]) -> list[int]:
    """Tokens per text, special tokens included (what the model will see)."""
    return [len(e.ids) for e in tokenizer_for(model).encode_batch(texts)]
