"""How long a cached result lives: the expiry policy of an entry class (``cache_classes``
in the settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ExpiryPolicy(BaseModel):
    """``ttl``: gone ``ttl_s`` after it was written. ``sliding``: gone after ``ttl_s``
    without a hit. ``tags``: kept until one of its scopes is invalidated (``ttl_s``, if set,
    is a backstop)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["ttl", "sliding", "tags"]
    ttl_s: float | None = Field(default=None, gt=0)

    def model_post_init(self, _: object) -> None:
        if self.mode != "tags" and self.ttl_s is None:
            raise ValueError(f"expiry mode {self.mode!r} needs ttl_s")


DEFAULT_CLASSES: dict[str, ExpiryPolicy] = {
    "default": ExpiryPolicy(mode="ttl", ttl_s=24 * 3600),
    "sliding": ExpiryPolicy(mode="sliding", ttl_s=3600),
    "tagged": ExpiryPolicy(mode="tags"),
}
