"""A model's own fast tokenizer: loading it, and counting tokens the way the model sees
them (the client buckets by this count; the encoder backends encode with it)."""

from __future__ import annotations

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
    """Tokens per text, special tokens included (what the model will see)."""
    return [len(e.ids) for e in tokenizer_for(model).encode_batch(texts)]
