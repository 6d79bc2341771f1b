"""transformers' feed-forward chunking without its check on every call.

BERT's layers (and those of the encoders built like it) run their feed-forward through
``transformers.pytorch_utils.apply_chunking_to_forward``, which calls ``inspect.signature``
on the function it is given, on every call, to check how many arguments it takes: 13 us a
layer a forward pass (measured), with chunking off too (``chunk_size_feed_forward`` 0, as in
every model headrace serves). That is host time before every batch, which on a GPU is what
limits an encoder (issue 35). ``skip_chunking_checks`` rebinds that name, in the
transformers modules that imported it, to a function that calls the feed-forward directly
when chunking is off (what transformers does after its check) and leaves any other call to
transformers' own.

Modules are read through their ``__dict__``, never ``getattr``: a package of
``transformers.models`` is a lazy module whose attribute lookup imports what it names (on
transformers 5.17, the GPU machine's, asking one for this name imported an image processor
that needs torchvision, and the embedding backend failed to build).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

NAME = "apply_chunking_to_forward"


def skip_chunking_checks() -> int:
    """Rebind the name in every loaded ``transformers.models`` module that holds
    transformers' own function; returns how many were rebound (0 once done, or when
    transformers has no such function)."""
    utils = sys.modules.get("transformers.pytorch_utils")
    original = getattr(utils, NAME, None) if utils is not None else None
    if original is None:
        return 0
    direct = _direct(original)
    rebound = 0
    for name, module in list(sys.modules.items()):
        if name.startswith("transformers.models.") and _own(module) is original:
            setattr(module, NAME, direct)
            rebound += 1
    return rebound


def _own(module: Any) -> Any:
    """The name as the module holds it, without a lazy module's lookup (None: not held)."""
    return getattr(module, "__dict__", {}).get(NAME)


@contextmanager
def transformers_own() -> Iterator[None]:
    """transformers' own function back where it was rebound, within: a baseline measured as
    its users run it (``scripts/gpu_bench_embeddings.py``'s sentence-transformers)."""
    rebound: list[tuple[Any, Callable[..., Any]]] = []
    for name, module in list(sys.modules.items()):
        direct = _own(module) if name.startswith("transformers.models.") else None
        if direct is not None and getattr(direct, "__module__", None) == __name__:
            rebound.append((module, direct))
    for module, direct in rebound:
        setattr(module, NAME, direct.__wrapped__)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, direct in rebound:
            setattr(module, NAME, direct)


def _direct(original: Callable[..., Any]) -> Callable[..., Any]:
    def apply_chunking_to_forward(
        forward_fn: Callable[..., Any], chunk_size: int, chunk_dim: int, *input_tensors: Any
    ) -> Any:
        if chunk_size == 0 and input_tensors:
            return forward_fn(*input_tensors)
        return original(forward_fn, chunk_size, chunk_dim, *input_tensors)

    apply_chunking_to_forward.__wrapped__ = original  # type: ignore[attr-defined]
    return apply_chunking_to_forward
