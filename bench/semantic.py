"""The semantic cache's evaluation: how often it serves the answer to another question, and
the hit rate it buys, on a labelled set built from text the project does not ship.

The text: sentences of Python's own reference documentation (``pydoc_data.topics``) and of
its standard library's docstrings, prose only (in every CPython, not in this project). They
are split in two halves. The first half is cached (each sentence a prompt
whose answer is in the cache, through ``SemanticIndex`` on Redis, the client's own code);
then queries, each labelled:

- ``paraphrase`` (should be served its own sentence's answer): rewordings that keep the
  meaning: a request wrapper ("Can you explain this: ..."), contractions, synonyms of
  common words, case and punctuation;
- ``negation``, ``number``, ``name`` (must not be served): the sentence negated, about
  another number, about another named thing (the guards' classes);
- ``antonym`` (must not be served): one word swapped for its opposite (first/last,
  before/after, ...): no guard looks for these, only the threshold stops them;
- ``other`` (must not be served): every sentence of the second half, never cached: the
  nearest cached sentence is about something else.

A false hit is a negative served anything, or a paraphrase served another sentence's
answer. Per threshold: paraphrases served right (the hit rate), false hits per class and in
all, with the guards and without. The default (``cache_semantic_threshold``) is the lowest
threshold at most 0.1% false. The rewordings are made by rules, so they are easier than
people's paraphrases: the hit rate is an upper bound; the false-hit rate is what counts.

    python -m bench.semantic [--sentences 6000] [--thresholds 0.80,...]
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from headrace import connections
from headrace.cache.semantic import Neighbour, SemanticIndex, choose
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.producers.semantic import Embedder

console = Console(width=140)
NEGATIVE = ("negation", "number", "name", "antonym", "other")
TARGET_FALSE = 0.001
SET_PATH = Path(".headrace/semantic-eval.jsonl")

WRAPPERS = ("Can you explain this: {}", "Please explain: {}", "Question: {}", "{} Explain.")
CONTRACTIONS = {
    "do not": "don't",
    "does not": "doesn't",
    "is not": "isn't",
    "are not": "aren't",
    "cannot": "can't",
    "it is": "it's",
    "that is": "that's",
    "will not": "won't",
}
SYNONYMS = {
    "returns": "gives back",
    "uses": "employs",
    "used": "employed",
    "large": "big",
    "small": "little",
    "begins": "starts",
    "shows": "displays",
    "allows": "lets",
    "means": "signifies",
    "gets": "obtains",
    "usually": "normally",
    "also": "as well",
    "because": "since",
    "however": "but",
    "must": "has to",
    "example": "instance",
    "called": "named",
    "creates": "makes",
    "whole": "entire",
    "often": "frequently",
}
ANTONYMS = {
    "first": "last",
    "before": "after",
    "true": "false",
    "increase": "decrease",
    "minimum": "maximum",
    "add": "remove",
    "open": "close",
    "start": "stop",
    "left": "right",
    "lower": "upper",
    "input": "output",
    "inside": "outside",
    "read": "write",
    "enable": "disable",
    "include": "exclude",
    "more": "less",
    "larger": "smaller",
    "positive": "negative",
    "same": "different",
    "local": "global",
    "always": "sometimes",
    "beginning": "end",
    "import": "export",
    "synchronous": "asynchronous",
    "mutable": "immutable",
    "inner": "outer",
    "explicit": "implicit",
}
ANTONYMS.update({v: k for k, v in list(ANTONYMS.items())})
AUXILIARIES = ("is", "are", "can", "must", "will", "should", "may", "was", "were", "could")
OTHER_NAMES = ("Java", "Rust", "Haskell", "Perl", "Kotlin", "Fortran")


DOC_MODULES = tuple(
    " ".join(
        [
            "abc argparse array ast asyncio base64 bisect calendar codecs collections configparser "
            "contextlib copy csv dataclasses datetime decimal difflib email enum fnmatch fractions "
            "functools gettext glob gzip hashlib heapq hmac html http.client imaplib importlib "
            "inspect io ipaddress itertools json locale logging lzma math mimetypes numbers "
            "operator os pathlib pickle platform pprint queue random re sched secrets selectors "
            "shlex shutil signal smtplib socket sqlite3 ssl statistics string struct subprocess "
            "tarfile tempfile textwrap threading time timeit tokenize traceback types typing "
            "unittest urllib.parse uuid warnings weakref zipfile zlib",
        ]
    ).split()
)


def sentences(limit: int, seed: int = 5) -> list[str]:
    """Sentences of CPython's reference documentation and of its standard library's
    docstrings (in every CPython: text this project does not ship), prose only."""
    import importlib
    import inspect
    import pydoc_data.topics as topics

    texts = list(topics.topics.values())
    for name in DOC_MODULES:
        module = importlib.import_module(name)
        texts.append(inspect.getdoc(module) or "")
        for _, member in inspect.getmembers(module):
            if inspect.isfunction(member) or inspect.isclass(member):
                texts.append(inspect.getdoc(member) or "")
    found = set()
    for text in texts:
        for paragraph in re.split(r"\n\s*\n", text):
            flat = re.sub(r"\s+", " ", paragraph).strip()
            for s in re.split(r"(?<=[.?!])\s+(?=[A-Z])", flat):
                words = s.split()
                clean = not re.search(r"[*|=<>{}\[\]_#@~^\\]|\.\.\.|--|\d\.\d\.\d|\(\)", s)
                if 7 <= len(words) <= 30 and s[0].isupper() and s[-1] in ".?" and clean:
                    found.add(s)
    # one sentence per wording (two docstrings often say the same thing, punctuated apart)
    by_words = {tuple(re.findall(r"[a-z0-9]+", s.lower())): s for s in sorted(found)}
    unique = sorted(by_words.values())
    random.Random(seed).shuffle(unique)
    return unique[:limit]


def _swap(sentence: str, table: dict[str, str]) -> str | None:
    """``sentence`` with its first word found in ``table`` replaced (None: none is)."""
    for match in re.finditer(r"[A-Za-z]+", sentence):
        word = match.group()
        if word.lower() in table:
            new = table[word.lower()]
            new = new.capitalize() if word[0].isupper() else new
            return sentence[: match.start()] + new + sentence[match.end() :]
    return None


def paraphrases(sentence: str, rng: random.Random) -> list[str]:
    out = [rng.choice(WRAPPERS).format(sentence)]
    contracted = sentence
    for long, short in CONTRACTIONS.items():
        contracted = contracted.replace(long, short)
    if contracted != sentence:
        out.append(contracted)
    if (synonym := _swap(sentence, SYNONYMS)) is not None:
        out.append(synonym)
    out.append(sentence[0].lower() + sentence[1:].rstrip(".?") + "?")
    return out


def negatives(sentence: str, rng: random.Random) -> dict[str, str]:
    out = {}
    words = sentence.split(" ")
    for i, word in enumerate(words):
        if word in AUXILIARIES:
            out["negation"] = " ".join([*words[: i + 1], "not", *words[i + 1 :]])
            break
    else:
        out["negation"] = "It is not true that " + sentence[0].lower() + sentence[1:]
    digits = re.search(r"\d+", sentence)
    if digits is not None:
        other = str(int(digits.group()) + rng.randint(1, 9))
        out["number"] = sentence[: digits.start()] + other + sentence[digits.end() :]
    else:
        out["number"] = sentence.rstrip(".?") + f" in {rng.randint(2, 9)} steps."
    out["name"] = sentence.rstrip(".?") + f" in {rng.choice(OTHER_NAMES)}."
    if (antonym := _swap(sentence, ANTONYMS)) is not None:
        out["antonym"] = antonym
    return out


@dataclass
class Query:
    text: str
    label: str  # "paraphrase" or a negative class
    source: int | None  # the cached sentence it rewords (paraphrases and negatives of one)


def labelled_set(cached: list[str], others: list[str], seed: int = 9) -> list[Query]:
    rng = random.Random(seed)
    queries = []
    for i, sentence in enumerate(cached):
        queries += [Query(p, "paraphrase", i) for p in paraphrases(sentence, rng)]
        queries += [Query(t, label, i) for label, t in negatives(sentence, rng).items()]
    queries += [Query(t, "other", None) for t in others]
    return queries


def main(
    sentences_: int = typer.Option(6000, "--sentences"),
    thresholds: str = "0.80,0.85,0.88,0.90,0.92,0.94,0.95,0.96,0.97,0.98",
) -> dict[float, dict[str, float]]:
    settings = Settings()
    corpus = sentences(sentences_)
    cached, others = corpus[: len(corpus) // 2], corpus[len(corpus) // 2 :]
    queries = labelled_set(cached, others)
    SET_PATH.parent.mkdir(parents=True, exist_ok=True)
    with SET_PATH.open("w") as out:
        for q in queries:
            cached_text = cached[q.source] if q.source is not None else None
            out.write(json.dumps({"cached": cached_text, "query": q.text, "label": q.label}) + "\n")
    counts = Counter(q.label for q in queries)
    console.print(
        f"{len(cached)} cached prompts; {len(queries)} labelled queries "
        f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}); set: {SET_PATH}"
    )
    embed = Embedder(settings)
    index = SemanticIndex(
        connections.redis_client(settings), f"bench-semantic-{uuid.uuid4().hex[:6]}"
    )
    scope = "eval"
    with LocalStack(settings).while_needed():
        try:
            vectors = _batched(embed, cached)
            for i, (text, vector) in enumerate(zip(cached, vectors, strict=True)):
                index.add(scope, vector, text, str(i))
            found = [index.search(scope, v) for v in _batched(embed, [q.text for q in queries])]
        finally:
            index.drop(scope)
    rows = {float(t): score(queries, found, float(t)) for t in thresholds.split(",")}
    report(rows, counts)
    return rows


def _batched(embed: Embedder, texts: list[str], size: int = 256) -> list[np.ndarray]:
    """Each text's vector, in order; embedded in batches of similar lengths (little padding)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[np.ndarray] = [np.empty(0)] * len(texts)
    for at in range(0, len(order), size):
        chunk = order[at : at + size]
        for i, vector in zip(chunk, embed([texts[i] for i in chunk]), strict=True):
            out[i] = vector
    return out


def score(queries: list[Query], found: list[list[Neighbour]], threshold: float) -> dict[str, float]:
    """Per label, the share served right (paraphrases) or served at all (negatives), with
    the guards; ``false`` and ``false_unguarded``: false hits over every query."""
    served: Counter[str] = Counter()
    false = false_unguarded = 0
    for query, neighbours in zip(queries, found, strict=True):
        guarded = choose(query.text, neighbours, threshold).served
        above = [n for n in neighbours if n.similarity >= threshold]
        bare = max(above, key=lambda n: n.similarity) if above else None
        right = str(query.source)
        if query.label == "paraphrase":
            served["paraphrase"] += guarded is not None and guarded.key == right
            false += guarded is not None and guarded.key != right
            false_unguarded += bare is not None and bare.key != right
        else:
            served[query.label] += guarded is not None
            false += guarded is not None
            false_unguarded += bare is not None
    counts = Counter(q.label for q in queries)
    row = {label: served[label] / counts[label] for label in counts}
    row["false"] = false / len(queries)
    row["false_unguarded"] = false_unguarded / len(queries)
    return row


def report(rows: dict[float, dict[str, float]], counts: Counter[str]) -> None:
    table = Table(
        "threshold",
        "paraphrases served (hit rate)",
        *[f"{label} served" for label in NEGATIVE if counts[label]],
        "false hits",
        "false hits, no guards",
    )
    for threshold, row in rows.items():
        table.add_row(
            f"{threshold:.2f}",
            f"{row['paraphrase']:.1%}",
            *[f"{row[label]:.2%}" for label in NEGATIVE if counts[label]],
            f"{row['false']:.2%}",
            f"{row['false_unguarded']:.2%}",
        )
    console.print(table)
    meeting = [t for t, row in rows.items() if row["false"] <= TARGET_FALSE]
    if meeting:
        best = min(meeting)
        console.print(
            f"lowest threshold at most {TARGET_FALSE:.1%} false: {best:.2f} (hit rate "
            f"{rows[best]['paraphrase']:.1%}, false hits {rows[best]['false']:.3%})"
        )
    else:
        console.print(f"no threshold here is at most {TARGET_FALSE:.1%} false")


if __name__ == "__main__":
    typer.run(main)
