"""The piece counter counts exactly what the tokenizer's full encode counts, for both model
families headrace ships (BERT WordPiece, GPT-2 byte-level BPE), on generated text that mixes
what the split must get right (punctuation, digits, contractions, runs of whitespace) and what
must go to the full encode (non-ASCII, control characters, added tokens)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, pre_tokenizers

from headrace.models import piece_count
from headrace.models.piece_count import piece_counter
from headrace.models.tokenizer import count_with, tokenizer_for
from headrace.ops.sample_texts import long_tail_texts

MODELS = ["all-MiniLM-L6-v2", "headrace-test-lm"]

PARTS = st.sampled_from(
    [
        "the",
        "The",
        "THE",
        "unbelievable",
        "tokenization",
        "x",
        "Hello",
        "world",
        "2026",
        "3.14",
        "1,000",
        "it's",
        "we've",
        "they'll",
        "I'd",
        "I'm",
        "don't",
        "'S",
        "'",
        "''",
        " ",
        "  ",
        "   ",
        "\t",
        "\n",
        "\n\n",
        "\r\n",
        " \n ",
        ".",
        ",",
        "!?",
        "...",
        "--",
        "(a)",
        "[b]",
        "{c}",
        "<d>",
        "$5",
        "50%",
        "a_b",
        "@user",
        "#tag",
        "e-mail",
        "x=y+z",
        "~^|`\\",
        '"quoted"',
        "café",
        "naïve",
        "日本語",
        "\x00",
        "\x07",
        "\x0b",
        "\x0c",
        "\x1c",
        "\x7f",
        "\u00a0",
        "\u2003",
        "[MASK]",
        "[mask]",
        "[CLS]",
        "<|endoftext|>",
        "a" * 120,
        "ab" * 60 + "!",
        "0" * 30,
    ]
)
TEXTS = st.lists(PARTS, max_size=30).map("".join) | st.text(max_size=60)


def exact(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    return [len(e.ids) for e in tokenizer.encode_batch(texts)]


@pytest.mark.parametrize("model", MODELS)
def test_both_families_get_a_piece_counter(model: str) -> None:
    assert piece_counter(tokenizer_for(model)) is not None


@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXTS, min_size=1, max_size=8))
def test_counts_what_the_full_encode_counts(model: str, texts: list[str]) -> None:
    tokenizer = tokenizer_for(model)
    counter = piece_counter(tokenizer)
    assert counter is not None
    assert counter.count(texts) == exact(tokenizer, texts)
    assert counter.count(texts) == exact(tokenizer, texts)  # again, from what it has seen


@pytest.mark.parametrize("model", MODELS)
def test_sample_texts_and_count_with(model: str) -> None:
    tokenizer = tokenizer_for(model)
    texts = long_tail_texts(2_000, seed=5, model=model)
    assert count_with(tokenizer, texts) == exact(tokenizer, texts)


def test_a_flood_of_new_pieces_starts_the_memory_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter remembers at most PIECES_KEPT pieces; past that it starts over, and counts
    stay exact on either side."""
    monkeypatch.setattr(piece_count, "PIECES_KEPT", 50)
    tokenizer = tokenizer_for("all-MiniLM-L6-v2")
    counter = piece_counter(tokenizer)
    assert counter is not None
    texts = [f"word{k} other{k} and{k}" for k in range(40)]
    assert counter.count(texts[:10]) == exact(tokenizer, texts[:10])
    assert len(counter._seen) == 30
    assert counter.count(texts) == exact(tokenizer, texts)  # 90 more: past the limit
    assert len(counter._seen) == 50
    assert counter.count(texts) == exact(tokenizer, texts)


@pytest.mark.parametrize("model", MODELS)
def test_long_pieces_are_counted_and_not_kept(model: str) -> None:
    """A text of one enormous word (hostile input) is counted right every time, but the
    counter does not keep it: its memory is bounded by pieces and by their length."""
    tokenizer = tokenizer_for(model)
    counter = piece_counter(tokenizer)
    assert counter is not None
    texts = ["x" * 100_000, "a " + "yz" * 40 + " b"]
    assert counter.count(texts) == exact(tokenizer, texts)
    assert counter.count(texts) == exact(tokenizer, texts)
    assert max(map(len, counter._seen)) <= piece_count.LONGEST_KEPT


def test_a_tokenizer_of_another_shape_gets_none() -> None:
    """A byte-level BPE that adds a prefix space splits differently: no piece counter, and
    count_with still counts right through the full encode."""
    tokenizer = Tokenizer.from_str(tokenizer_for("headrace-test-lm").to_str())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert piece_counter(tokenizer) is None
    texts = ["hello world", "a  b"]
    assert count_with(tokenizer, texts) == exact(tokenizer, texts)
