"""Model backends: one worker process hosts one backend, chosen by model name."""

from headrace.workers.backends.base import Backend, EncodedItem, LoadTimings
from headrace.workers.backends.embedding import EmbeddingBackend

__all__ = ["Backend", "EmbeddingBackend", "EncodedItem", "LoadTimings"]
