"""Guards of the semantic cache (pure): two prompts close in embedding space that still ask
different things. Embeddings of a question and its negation, or of the same question about
another number or another name, are close (cosine 0.83-0.9997 in GPTCache's reports,
zilliztech/GPTCache#694): a near neighbour is served only if neither differs in

- negation: the negating words each holds (``not``, ``never``, ``no``, ``without``, ``n't``);
- numbers: the numbers each holds, as digits or as number words;
- names: what looks like a named entity or an identifier: a capitalised word not first in
  its sentence, a word in capitals, a word with digits or inner capitals (``gpt4``,
  ``iPhone``), a quoted string, an e-mail address or a URL;
- substitution: each holds a content word or two the other lacks, and the rest is the
  same: one word swapped for another (``first`` for ``last``, ``apples`` for ``oranges``)
  is how a near-identical prompt asks something else; a rewording that only adds words
  ("Can you explain: ...") or changes function words passes. A synonym swapped in is
  refused too;
- addition: one holds content words the other lacks, beyond words that frame a request
  (``explain``, ``tell``, ``question``, ``help``): "the keys of a dict" is not "the keys,
  values or items of a dict";
- order: the same content words in another order: "convert A to B" is not "convert B to
  A".

Each is compared as a multiset of lower-cased tokens. The guards are deliberately strict:
a guard that refuses a true paraphrase costs one computation; one that lets a negation
through serves a wrong answer.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

Conflict = Literal["negation", "numbers", "names", "substitution", "addition", "order"]
APOSTROPHE = "\u2019"  # a typographic apostrophe reads as "'"

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'\u2019\-]*|\d+(?:[.,:/]\d+)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n)\s*[\"'(\[]*([A-Za-z][\w'\u2019\-]*)")
_QUOTED = re.compile(r"\"([^\"]{1,80})\"|“([^”]{1,80})”|`([^`]{1,80})`")
_LINK = re.compile(r"\S+@\S+\.\w+|https?://\S+|www\.\S+")


def _vocabulary(words: str) -> frozenset[str]:
    return frozenset(words.split())


NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "none",
        "nobody",
        "nothing",
        "neither",
        "nor",
        "nowhere",
        "without",
        "cannot",
        "cant",
        "can't",
        "isnt",
        "isn't",
        "arent",
        "aren't",
        "wasnt",
        "wasn't",
        "werent",
        "weren't",
        "dont",
        "don't",
        "doesnt",
        "doesn't",
        "didnt",
        "didn't",
        "wont",
        "won't",
        "wouldnt",
        "wouldn't",
        "shouldnt",
        "shouldn't",
        "couldnt",
        "couldn't",
        "hasnt",
        "hasn't",
        "havent",
        "haven't",
        "hadnt",
        "hadn't",
        "mustnt",
        "mustn't",
        "neednt",
        "needn't",
        "aint",
        "ain't",
    ]
)
NUMBER_WORDS = frozenset(
    [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
        "thirty",
        "forty",
        "fifty",
        "sixty",
        "seventy",
        "eighty",
        "ninety",
        "hundred",
        "thousand",
        "million",
        "billion",
        "trillion",
        "dozen",
        "half",
        "quarter",
        "third",
        "first",
        "second",
        "fifth",
        "tenth",
        "once",
        "twice",
        "double",
        "triple",
        "single",
        "pair",
    ]
)


FUNCTION_WORDS = _vocabulary(
    "a an the i you he she it we they me him her us them my your his its our their "
    "this that these those is are was were be been being am do does did have has had "
    "will would shall should can could may might must and or but so if then than as "
    "while whether of to for with on at by from into onto about what which who whom "
    "whose when where why how please just also very there here some any each such "
    "s t"
)
MAX_SWAPPED = 2  # content words on each side past which a difference is a rewording
FRAMING_WORDS = _vocabulary(
    "explain explanation tell question answer help understand know describe show "
    "wonder want like need ask briefly simply short detail thank thanks hi hello"
)


def conflict(a: str, b: str) -> Conflict | None:
    """Why ``a``'s cached answer must not serve ``b`` although they are near (None: no
    guard objects)."""
    if _negations(a) != _negations(b):
        return "negation"
    if _numbers(a) != _numbers(b):
        return "numbers"
    if _names(a) != _names(b):
        return "names"
    a_seq, b_seq = _content(a), _content(b)
    a_words, b_words = Counter(a_seq), Counter(b_seq)
    a_only, b_only = a_words - b_words, b_words - a_words
    if a_only and b_only:
        small = a_only.total() <= MAX_SWAPPED and b_only.total() <= MAX_SWAPPED
        return "substitution" if small else None  # a rewording: the threshold decides
    if any(w not in FRAMING_WORDS for w in a_only + b_only):
        return "addition"
    shared = a_words & b_words
    if [w for w in a_seq if w in shared] != [w for w in b_seq if w in shared]:
        return "order"
    return None


def _content(text: str) -> list[str]:
    """Content words in order, crudely stemmed (``returns`` and ``return`` are one)."""
    found: list[str] = []
    for word in (part for w in _words(text) for part in w.split("-")):
        low = word.lower().removesuffix("'s")
        if low in FUNCTION_WORDS or low in NEGATIONS or not low.isalpha():
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if len(low) > len(suffix) + 3 and low.endswith(suffix):
                low = low[: -len(suffix)]
                break
        found.append(low)
    return found


def _words(text: str) -> list[str]:
    return _WORD.findall(text.replace(APOSTROPHE, "'"))


def _negations(text: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for word in _words(text):
        low = word.lower()
        if low in NEGATIONS or low.endswith("n't"):
            found["not"] += 1  # "isn't" and "is not" say the same
    return found


def _numbers(text: str) -> Counter[str]:
    return Counter(
        w.lower().replace(",", "")
        for w in _words(text)
        if w[0].isdigit() or w.lower() in NUMBER_WORDS
    )


def _names(text: str) -> Counter[str]:
    starts = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    found: Counter[str] = Counter()
    for match in _WORD.finditer(text.replace(APOSTROPHE, "'")):
        word = match.group()
        if word[0].isdigit():
            continue  # numbers have their own guard
        if word == "I":
            continue
        inner = any(c.isupper() for c in word[1:]) or any(c.isdigit() for c in word)
        named = word[0].isupper() and match.start() not in starts
        if inner or named or (len(word) > 1 and word.isupper()):
            found[word.lower()] += 1
    for quoted in _QUOTED.finditer(text):
        found["q:" + next(g for g in quoted.groups() if g is not None).lower()] += 1
    for link in _LINK.finditer(text):
        found["l:" + link.group().lower()] += 1
    return found
