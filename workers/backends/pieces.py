"""Each token's own text and bytes, as log probabilities report them (OpenAI's ``token``
and ``bytes``). A byte-level BPE token (GPT-2, Llama 3, Qwen...) is a run of bytes spelled
in printable characters; the bytes are read back from that spelling, so a token that holds
half of a UTF-8 character still reports its real bytes (its text shows U+FFFD). Other
tokenizers: the token decoded alone, and its UTF-8."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _byte_of() -> dict[str, int]:
    """GPT-2's printable spelling of each byte, inverted (the table every byte-level BPE
    tokenizer uses)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    spelled, extra = {}, 0
    for b in range(256):
        if b in kept:
            spelled[chr(b)] = b
        else:
            spelled[chr(256 + extra)] = b
            extra += 1
    return spelled


def byte_level(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` (transformers, fast) spells its tokens byte by byte."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return type(decoder).__name__ == "ByteLevel"


def token_pieces(tokenizer: Any, ids: list[int]) -> list[tuple[str, list[int]]]:
    """(text, UTF-8 bytes) of each token of ``ids``, each on its own."""
    if byte_level(tokenizer):
        table = _byte_of()
        out = []
        for piece in tokenizer.convert_ids_to_tokens(ids):
            if piece is not None and all(ch in table for ch in piece):
                raw = bytes(table[ch] for ch in piece)
                out.append((raw.decode("utf-8", errors="replace"), list(raw)))
            else:  # a special or added token, spelled as itself
                text = piece or ""
                out.append((text, list(text.encode())))
        return out
    texts = [tokenizer.decode([i]) for i in ids]
    return [(text, list(text.encode())) for text in texts]
