"""A reproducible long-tail text mix: ~70% under 32 tokens, ~25% 32-128, ~5% 128-512."""

from __future__ import annotations

import random

from headrace.models.tokenizer import count_tokens

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "they",
    "this",
    "have",
    "are",
    "not",
    "but",
    "had",
    "were",
    "which",
    "all",
    "she",
    "one",
    "an",
    "been",
    "there",
    "their",
    "when",
    "who",
    "more",
    "out",
    "some",
    "into",
    "would",
    "time",
    "up",
    "about",
    "than",
    "them",
    "only",
    "over",
    "also",
    "after",
    "new",
    "can",
    "other",
    "year",
    "two",
    "first",
    "these",
    "may",
    "such",
    "people",
    "most",
    "made",
    "any",
    "like",
    "between",
    "well",
    "three",
    "even",
    "through",
    "because",
    "world",
    "each",
    "river",
    "water",
    "channel",
    "turbine",
    "engineer",
    "queue",
    "batch",
    "model",
    "token",
    "signal",
    "bridge",
    "market",
    "garden",
    "winter",
    "summer",
    "village",
    "morning",
    "evening",
    "question",
    "answer",
    "system",
    "network",
    "kernel",
    "memory",
    "budget",
    "sample",
    "window",
    "record",
    "offset",
    "reply",
    "request",
    "worker",
    "pipeline",
    "bucket",
    "stream",
    "cache",
    "tenant",
    "product",
    "catalog",
    "change",
    "event",
    "price",
    "order",
    "customer",
    "invoice",
    "shipment",
    "label",
]

MIX: tuple[tuple[float, int, int], ...] = ((0.70, 6, 31), (0.25, 32, 128), (0.05, 129, 500))


def sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(max(1, words)))
    return text[0].upper() + text[1:] + "."


def long_tail_texts(count: int, seed: int = 7, model: str = "all-MiniLM-L6-v2") -> list[str]:
    """``count`` texts whose token lengths follow MIX (checked with the model's tokenizer)."""
    rng = random.Random(seed)
    targets = []
    for _ in range(count):
        pick, acc = rng.random(), 0.0
        for share, low, high in MIX:
            acc += share
            if pick <= acc:
                targets.append(rng.randint(low, high))
                break
        else:
            targets.append(rng.randint(MIX[-1][1], MIX[-1][2]))
    # each word is one token here, plus [CLS], [SEP] and the full stop
    texts = [sentence(rng, t - 3) for t in targets]
    counts = count_tokens(model, texts)
    return [t for t, n in zip(texts, counts, strict=True) if n <= 512]
