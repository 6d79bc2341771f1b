"""A request's input checked before it is sent: a text refused (or cut) when it cannot fit
before it is tokenized, an input given as token ids checked against the model's vocabulary,
and the tokens each will be (special tokens included: what the model sees)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from headrace.models.chat_format import tools_refused
from headrace.models.tokenizer import count_with
from headrace.schemas.errors import EmptyInputError, InputTooLongError, InvalidRequestError
from headrace.schemas.messages import SCORED, Task
from headrace.schemas.params import GenerateParams

if TYPE_CHECKING:
    from headrace.models.registry import ModelSpec

# A text longer than this many characters per token of its limit is refused (or cut) before
# it is tokenized: no tokenizer's token is longer than a few dozen characters of real text.
CHARS_PER_TOKEN_MAX = 64
Given = str | Sequence[int]  # a text, or token ids of the model's tokenizer (embeddings)


def bounded(i: int, text: str, limit: int, cut: bool, keep_end: bool) -> str:
    """``text``, refused before it is tokenized when it cannot fit: empty, or past
    ``limit`` tokens of ``CHARS_PER_TOKEN_MAX`` characters each (cut to that where ``cut``:
    its end for a prompt, its start for an embedding). Tokenizing a 40 MB string took 25 s."""
    if not text.strip():
        raise EmptyInputError(f"text {i} is empty")
    chars = limit * CHARS_PER_TOKEN_MAX
    if len(text) <= chars:
        return text
    if cut:
        return text[-chars:] if keep_end else text[:chars]
    raise InputTooLongError(
        f"text {i} has {len(text)} characters: more than {limit} tokens can hold "
        f"(at most {CHARS_PER_TOKEN_MAX} characters a token); pass truncate=True to cut it"
    )


def token_ids(given: Sequence[Given], tokenizer: Tokenizer, model: str) -> list[list[int] | None]:
    """Each input given as token ids (None for a text), checked: not empty, each id in the
    model's vocabulary."""
    vocab = tokenizer.get_vocab_size()
    out: list[list[int] | None] = []
    for i, item in enumerate(given):
        if isinstance(item, str):
            out.append(None)
            continue
        ids = [int(t) for t in item]
        if not ids:
            raise EmptyInputError(f"input {i} has no token ids", param="input")
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise InvalidRequestError(
                f"input {i}: token id {bad} is not in {model}'s vocabulary (0..{vocab - 1})",
                param="input",
            )
        out.append(ids)
    return out


def counted(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    ids: Sequence[list[int] | None],
    pairs: Sequence[str | None],
) -> list[int]:
    """The tokens of each input: a text's, or ids with the special tokens the tokenizer puts
    around a text (an input given as ids has the text ``""``: its count is those tokens);
    with a pair, both texts' counts, as the dispatcher counts them (at most a token over
    the pair's own)."""
    groups = [[t] if p is None else [t, p] for t, p in zip(texts, pairs, strict=True)]
    counts = iter(count_with(tokenizer, [t for group in groups for t in group]))
    return [
        sum(next(counts) for _ in group) + (len(g) if g is not None else 0)
        for group, g in zip(groups, ids, strict=True)
    ]


def check_generation(generation: GenerateParams, tokenizer: Tokenizer, spec: ModelSpec) -> None:
    """A generation's parameters against its model: ``logit_bias`` names tokens it has, and
    tool calls only for a model whose chat template (if any) has a tool format."""
    if generation.logit_bias:
        vocab = tokenizer.get_vocab_size()
        bad = next((t for t, _ in generation.logit_bias if t >= vocab), None)
        if bad is not None:
            raise InvalidRequestError(
                f"logit_bias: token id {bad} is not in {spec.name}'s vocabulary (0..{vocab - 1})"
            )
    fmt = generation.response_format
    if fmt is not None and fmt.type == "tool_calls":
        refused = tools_refused(spec.chat_template)
        if refused:
            raise InvalidRequestError(f"tools: {refused}", param="tools")


def asked_task(served: str, generating: bool) -> Task:
    """The task a call asks of a model serving ``served``: ``generate`` with generation
    parameters, the model's own rerank or classify, else ``embed``."""
    if generating:
        return "generate"
    return "rerank" if served == "rerank" else "classify" if served == "classify" else "embed"


def checked_pairs(pairs: Sequence[str | None] | None, n: int, task: Task) -> list[str | None]:
    """Each input's second text (None: none), checked: one per input, only for rerank and
    classify, every one for rerank, none empty."""
    if pairs is None:
        if task == "rerank":
            raise InvalidRequestError("a rerank scores pairs: give each query its document")
        return [None] * n
    if task not in SCORED:
        raise InvalidRequestError(f"pairs are for rerank and classify models, not {task}")
    if len(pairs) != n:
        raise ValueError("pairs and texts differ in length")
    for i, pair in enumerate(pairs):
        if pair is None and task == "rerank":
            raise InvalidRequestError(f"input {i} has no document to rank")
        if pair is not None and not pair.strip():
            raise EmptyInputError(f"input {i}'s pair is empty")
    return list(pairs)
