"""A model's own fast tokenizer: loading it, and counting tokens the way the model sees
them (the client buckets by this count; the dispatcher counts again; the encoder backends
encode with it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from headrace.models.piece_count import PieceCounter, encoded_lengths, piece_counter

if TYPE_CHECKING:
    from headrace.config.settings import Settings
    from headrace.models.registry import ModelSpec


def load_tokenizer(model_dir: Path) -> Tokenizer:
    """``tokenizer.json`` of a model folder, with no truncation and no padding (callers cut
    and pad themselves)."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@cache
def tokenizer_at(model_dir: Path) -> Tokenizer:
    return load_tokenizer(model_dir)


def tokenizer_of(spec: ModelSpec, settings: Settings | None = None) -> Tokenizer:
    """The tokenizer of a model version; a registered version's tokenizer and config files
    are fetched first when its source is remote (``settings`` says from where)."""
    if spec.manifest is not None and settings is not None:
        from headrace.models.registry import materialize

        folder, _ = materialize(spec, settings, {"tokenizer", "config"})
        return tokenizer_at(folder)
    return tokenizer_at(spec.path)


def tokenizer_for(model: str) -> Tokenizer:
    """A built-in model's tokenizer, by name."""
    # imported here: the registry needs pydantic, which a backend on a bare GPU machine
    # (scripts/gpu_check.py) may not have
    from headrace.models.registry import model_spec

    return tokenizer_at(model_spec(model).path)


def special_frame(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text's own ([CLS] and
    [SEP] for BERT's), which go around an input given as token ids too."""
    encoding = tokenizer.encode("a")
    own = [k for k, special in enumerate(encoding.special_tokens_mask) if not special]
    if not own:
        return list(encoding.ids), []
    return list(encoding.ids[: own[0]]), list(encoding.ids[own[-1] + 1 :])


def count_with(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
    """Tokens per text, special tokens included (what the model will see): by pieces where
    the tokenizer's split is known (``models/piece_count.py``, a sixth of a full encode's
    cost), else by a full encode."""
    counter = _piece_counter(tokenizer)
    if counter is not None:
        return counter.count(texts)
    return encoded_lengths(tokenizer, texts)


@lru_cache(maxsize=32)
def _piece_counter(tokenizer: Tokenizer) -> PieceCounter | None:
    """One counter per tokenizer object (its memory of pieces is the saving)."""
    return piece_counter(tokenizer)


def count_tokens(model: str, texts: list[str]) -> list[int]:
    """Tokens per text of a built-in model."""
    return count_with(tokenizer_for(model), texts)


def token_counter(settings: Settings) -> Callable[[Sequence[str]], list[int]]:
    """Counts texts' tokens with the tokenizer of ``settings.model``'s stable version, loaded
    on first use (a model this process cannot find counts nothing: its requests are answered
    unknown_model)."""
    from headrace.models.registry import resolve
    from headrace.schemas.errors import UnknownModelError

    def count(texts: Sequence[str]) -> list[int]:
        try:
            tokenizer = tokenizer_of(resolve(settings), settings)
        except UnknownModelError:
            return [0] * len(texts)
        return count_with(tokenizer, texts)

    return count
