"""A request's parameters (part of the wire contract, in every cache key): an embedding's
(``EmbedParams``), a generation's (``GenerateParams``: sampling, penalties and bias,
structured output, log probabilities), and the priority classes a request may name."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from headrace.schemas.logprobs import MAX_TOP_LOGPROBS
from headrace.schemas.response_format import ResponseFormat


class EmbedParams(BaseModel):
    """Parameters that change the output (and so belong in any cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    truncate: bool = False  # cut inputs past the model's max length instead of failing
    normalize: bool = True  # L2-normalise the pooled embedding


class ScoreParams(BaseModel):
    """Parameters of a rerank or classify request (part of any cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    truncate: bool = False  # cut a pair past the model's max length instead of failing


Priority = Literal["interactive", "default", "batch", "sheddable"]
SHED_SHARE = 0.5  # a sheddable request is overloaded at this share of its bucket's bound
RANKED: tuple[str, ...] = ("interactive", "default")  # then every other class, last


def priority_rank(priority: str) -> int:
    """A class's rank, 0 first: ``interactive``, ``default``, then ``batch``, ``sheddable``
    (and anything unknown) together. The dispatcher fills batches in this order and the
    continuous decoder lets a better-ranked row preempt a worse one."""
    return RANKED.index(priority) if priority in RANKED else len(RANKED)


TokenBias = tuple[Annotated[int, Field(ge=0)], Annotated[float, Field(ge=-100.0, le=100.0)]]


class GenerateParams(BaseModel):
    """Sampling parameters of a generation request. ``temperature`` 0 is greedy decoding
    (deterministic); otherwise ``seed`` makes sampling repeatable, whatever the batch-mates.

    ``presence_penalty``, ``frequency_penalty`` and ``logit_bias`` are OpenAI's: before a
    token is chosen, each token's logit gets its bias added and, per time it was generated
    so far in this row, ``frequency_penalty`` taken off, plus ``presence_penalty`` once if
    it was generated at all. ``logit_bias`` travels as (token id, bias) pairs, sorted (a
    mapping is accepted).

    ``response_format``: structured output (JSON, or JSON valid against a schema), enforced
    token by token (``schemas.response_format``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int = Field(default=16, ge=1, le=4096)
    temperature: float = Field(default=0.0, ge=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: tuple[Annotated[str, StringConstraints(min_length=1, max_length=64)], ...] = Field(
        default=(), max_length=8
    )
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stream: bool = False  # send ordered deltas before the final reply
    truncate: bool = False  # keep the end of a prompt past the model's context
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: tuple[TokenBias, ...] = Field(default=(), max_length=300)
    response_format: ResponseFormat | None = None
    # each generated token's log probability, with this many alternatives (None: none)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)

    def deterministic(self) -> bool:
        """Whether the same request gives the same text: greedy, or sampled from a given
        seed (without one, a request is seeded from its own id). Only such results are
        cached."""
        return self.temperature == 0.0 or self.seed is not None

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        """OpenAI's ``{"token id": bias}`` as sorted pairs; one id once."""
        if isinstance(value, dict):
            try:
                value = sorted((int(k), v) for k, v in value.items())
            except ValueError as exc:
                raise ValueError("logit_bias keys are token ids (integers)") from exc
        ids = [pair[0] for pair in value] if isinstance(value, list | tuple) else []
        if len(set(ids)) != len(ids):
            raise ValueError("logit_bias names a token id twice")
        return value
