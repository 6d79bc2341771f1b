"""Counting a text's tokens without encoding the whole text (issue 35: the dispatcher counts
every request, and the tokenizer's full encode was 30-40 us of its ~90 us a request).

A tokenizer of the two families headrace serves splits a text into pieces before its model
sees it (BERT's WordPiece: at whitespace, then at each punctuation mark; GPT-2's byte-level
BPE: its regular expression's pieces), and each piece's tokens do not depend on the pieces
around it.
So a text's count is the special tokens plus the sum of its pieces' counts, and a piece's
count, once known, is a dictionary lookup: natural text repeats its words. A piece not seen
yet is counted by the tokenizer itself (all of a call's new pieces in one batch).

The split is written here, for printable ASCII text only (and tab, newline, carriage return),
where it is exactly the tokenizer's: a text with any other character (accents, CJK, control
characters, whatever Unicode class rules differ on), or with an added token's text in it
(``[MASK]``, ``<|endoftext|>``), and every tokenizer of another shape, is counted by the
tokenizer's full encode. Tests compare both ways on generated and sample texts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import islice

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

# anything but printable ASCII, tab, newline and carriage return: counted by the tokenizer
_OUTSIDE = re.compile(r"[^\t\n\r\x20-\x7e]")
# GPT-2's pre-tokenizer (ByteLevel's use_regex) with its Unicode classes narrowed to ASCII
_GPT2 = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^ \t\n\rA-Za-z0-9]+"
    r"|[ \t\n\r]+(?![^ \t\n\r])|[ \t\n\r]+"
)
PIECES_KEPT = 100_000  # the pieces a counter remembers (a flood of new ones starts it over)
LONGEST_KEPT = 48  # characters of the longest piece remembered (longer ones: counted anew)


class PieceCounter:
    """Tokens per text of one tokenizer, special tokens included (``len(encode(t).ids)``).
    Safe to share between threads."""

    def __init__(
        self, tokenizer: Tokenizer, split: Callable[[str], list[str]], lowercase: bool
    ) -> None:
        self._tokenizer = tokenizer
        self._split = split
        self._lowercase = lowercase
        self._special = tokenizer.num_special_tokens_to_add(False)
        added = tokenizer.get_added_tokens_decoder().values()
        self._added = tuple(t.content for t in added if t.content)
        # a text without any added token's first character holds none of them (BERT's all
        # begin with "[": one scan of the text rather than one a token)
        self._added_firsts = tuple({t[0] for t in self._added})
        self._seen: dict[str, int] = {}

    def _holds_added(self, text: str) -> bool:
        return any(map(text.__contains__, self._added_firsts)) and any(
            map(text.__contains__, self._added)
        )

    def count(self, texts: Sequence[str]) -> list[int]:
        seen = self._seen  # this call's dictionary, whatever another thread starts over
        counts: list[int] = []
        unseen: list[tuple[int, list[str]]] = []  # texts with a piece not counted yet
        whole: list[int] = []  # texts the split does not cover
        for k, text in enumerate(texts):
            if not _covered(text) or self._holds_added(text):
                whole.append(k)
                counts.append(0)
                continue
            pieces = self._split(text.lower() if self._lowercase else text)
            try:
                counts.append(self._special + sum(map(seen.__getitem__, pieces)))
            except KeyError:
                unseen.append((k, pieces))
                counts.append(0)
        if unseen:
            new = list({p for _, pieces in unseen for p in pieces if p not in seen})
            found = dict(
                zip(new, encoded_lengths(self._tokenizer, new, specials=False), strict=True)
            )
            for k, pieces in unseen:
                counts[k] = self._special + sum(found[p] if p in found else seen[p] for p in pieces)
            # a hostile text's pieces (a megabyte without a space) are not kept: the memory
            # holds at most PIECES_KEPT pieces of at most LONGEST_KEPT characters
            kept = {p: n for p, n in found.items() if len(p) <= LONGEST_KEPT}
            if len(seen) + len(kept) > PIECES_KEPT:
                self._seen = dict(islice(kept.items(), PIECES_KEPT))
            else:
                seen.update(kept)
        if whole:
            lengths = encoded_lengths(self._tokenizer, [texts[k] for k in whole])
            for k, n in zip(whole, lengths, strict=True):
                counts[k] = n
        return counts


def _covered(text: str) -> bool:
    """Whether ``text`` is printable ASCII, tab, newline and carriage return only (the split
    is exact there). ``isascii`` is a flag CPython keeps and ``isprintable`` a loop in C:
    together half the regular expression's scan, which only texts with a tab, a newline or
    a control character still need."""
    return text.isascii() and (text.isprintable() or _OUTSIDE.search(text) is None)


def encoded_lengths(tokenizer: Tokenizer, texts: Sequence[str], specials: bool = True) -> list[int]:
    """Tokens per text by the tokenizer's full encode, without offsets (``encode_batch_fast``,
    tokenizers >= 0.21: counting needs none)."""
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    return [len(e.ids) for e in encode(list(texts), add_special_tokens=specials)]


def piece_counter(tokenizer: Tokenizer) -> PieceCounter | None:
    """A piece counter for ``tokenizer``, or None when its pipeline is not one whose split
    this module knows exactly (then only a full encode counts right)."""
    normalizer, pre, model = tokenizer.normalizer, tokenizer.pre_tokenizer, tokenizer.model
    if (
        isinstance(model, models.WordPiece)
        and isinstance(pre, pre_tokenizers.BertPreTokenizer)
        and isinstance(normalizer, normalizers.BertNormalizer)
    ):
        # on ASCII, BERT's normalizer only lowercases (if asked): clean_text drops control
        # characters, which are counted whole, and there are no accents or CJK to handle.
        # Its pre-tokenizer splits at whitespace (space, tab, newline, carriage return here),
        # then at each punctuation mark: a whitespace-separated chunk ("world,") is a piece
        # (str.split in C is three times as fast as a regular expression's pieces)
        return PieceCounter(tokenizer, str.split, lowercase=bool(normalizer.lowercase))
    if (
        isinstance(model, models.BPE)
        and model.dropout is None  # with dropout, a piece's tokens vary
        and isinstance(pre, pre_tokenizers.ByteLevel)
        and pre.use_regex
        and not pre.add_prefix_space
        and normalizer is None
    ):
        return PieceCounter(tokenizer, _GPT2.findall, lowercase=False)
    return None
