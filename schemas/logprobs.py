"""Log probabilities on the wire, in OpenAI's chat shape (the gateway also writes the
completions shape from it): each generated token's text, UTF-8 bytes and log probability
under the model, with its most likely alternatives."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs


class TopLogprob(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    """A generated token, and the ``top_logprobs`` most likely tokens at its step (most
    likely first; the token itself among them when it was one of them)."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list, max_length=MAX_TOP_LOGPROBS)
