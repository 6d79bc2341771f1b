"""What a computed request gives back, on the wire inside ``Reply.result``: an embedding, a
generation, or a pair's or text's scores (rerank and classify)."""

from __future__ import annotations

import base64
import struct
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from headrace.schemas.logprobs import TokenLogprob


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class EmbeddingResult(_Result):
    """The vector as JSON numbers (``embedding``), or, where the request asked for
    ``vector_encoding`` ``base64``, as its little-endian float32 bytes in base64
    (``embedding_base64``, OpenAI's ``encoding_format=base64``): one of the two."""

    embedding: list[float] | None = None
    embedding_base64: str | None = None
    token_count: int
    truncated: bool = False

    @model_validator(mode="after")
    def _one_encoding(self) -> Self:
        if (self.embedding is None) == (self.embedding_base64 is None):
            raise ValueError("an embedding result holds embedding or embedding_base64")
        return self

    def vector(self) -> list[float]:
        """The vector as floats, whichever way it came."""
        if self.embedding is not None:
            return self.embedding
        assert self.embedding_base64 is not None
        raw = base64.b64decode(self.embedding_base64)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))

    def as_base64(self) -> str:
        """The vector as little-endian float32 bytes in base64."""
        if self.embedding_base64 is not None:
            return self.embedding_base64
        assert self.embedding is not None
        return base64.b64encode(struct.pack(f"<{len(self.embedding)}f", *self.embedding)).decode()


class Usage(_Result):
    prompt_tokens: int
    completion_tokens: int


class GenerationResult(_Result):
    text: str
    # tool_calls: the text is whole tool calls (``schemas.tool_calls.read_calls``)
    finish_reason: Literal["stop", "length", "abort", "tool_calls"]
    usage: Usage
    truncated: bool = False  # the prompt's start was cut to fit the context
    logprobs: list[TokenLogprob] | None = None  # asked for with GenerateParams.logprobs


class ScoreResult(_Result):
    """A rerank model's relevance of a (query, document) pair: one score in 0..1 (the
    sigmoid of its logit), labelled ``score``; a classifier's probability of each label
    (softmax over its logits), in the model's label order (``id2label``)."""

    scores: list[float] = Field(min_length=1)
    labels: list[str] = Field(min_length=1)
    token_count: int
    truncated: bool = False

    @model_validator(mode="after")
    def _labelled(self) -> Self:
        if len(self.scores) != len(self.labels):
            raise ValueError("one label per score")
        return self


Result = EmbeddingResult | GenerationResult | ScoreResult
