"""The interface between the batch path and a model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class LoadTimings:
    load_weights_s: float = 0.0
    build_s: float = 0.0
    warm_up_s: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)


@dataclass
class EncodedItem:
    """One input after tokenisation: its token count, or why it cannot be computed."""

    ids: list[int]
    token_count: int
    truncated: bool = False
    too_long: bool = False


class Backend(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def timings(self) -> LoadTimings: ...

    def load_weights(self) -> None: ...

    def build(self) -> None: ...

    def warm_up(self, buckets: list[int]) -> None: ...

    def encode(self, texts: list[str], truncate: list[bool]) -> list[EncodedItem]: ...

    def embed(
        self, items: list[EncodedItem], normalize: list[bool]
    ) -> tuple[list[list[float]], int, int]:
        """Embeddings, real tokens and padded tokens of the batch (no too_long items)."""
        ...
