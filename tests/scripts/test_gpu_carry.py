"""scripts/gpu_carry.py: the fp16 MiniLM a lent GPU needs fits what a device call carries,
and embeds as the served model does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

from headrace.workers.backends import EmbeddingBackend
from tests.reference import cosines, reference_embeddings

ROOT = Path(__file__).resolve().parents[2]
CARRY_LIMIT = 64 * 2**20  # what one device call carries, the checkout included


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_carry", ROOT / "scripts" / "gpu_carry.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_carried_minilm_is_half_the_bytes_and_embeds_as_the_served_one(
    tmp_path: Path,
) -> None:
    carry = _script()
    assert carry.main(["--out", str(tmp_path)]) == 0
    folder = tmp_path / "minilm-fp16"
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < CARRY_LIMIT * 3 / 4  # room left for the checkout itself
    assert (folder / "1_Pooling" / "config.json").exists()  # sentence-transformers' pooling
    texts = ["water runs to the mill", "the wheel turns", "a sluice at the head of the race"]
    backend = EmbeddingBackend("all-MiniLM-L6-v2", folder, 256, device="cpu")
    backend.load_weights()
    backend.build()
    vectors, _, _ = backend.embed(backend.encode(texts, [False] * 3), [True] * 3)
    got = torch.tensor(vectors, dtype=torch.float32).tolist()
    assert min(cosines(got, reference_embeddings(texts))) > 0.999
