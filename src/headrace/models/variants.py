"""TEST VERSIONS of a real model, built locally to exercise versions (split, canary, shadow,
rollback) with real weights: the same architecture and tokenizer, every floating-point
weight moved by seeded Gaussian noise (``scale`` times the tensor's own standard deviation).
Its embeddings stay near the original's but differ (cosine about 0.9-0.99 at the default
scale), so a reply shows which version computed it. Labelled as a test version wherever it is
registered; never a model to serve anyone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

LABEL = "TEST VERSION: perturbed weights"
MARKER = "HEADRACE_TEST_VERSION.json"


def perturbed_copy(source: Path, dest: Path, *, scale: float = 0.02, seed: int = 0) -> Path:
    """Copy the model folder ``source`` to ``dest`` with its safetensors weights perturbed."""
    import torch
    from safetensors.torch import load_file, save_file

    if dest.exists():
        raise FileExistsError(f"{dest} exists")
    shutil.copytree(
        source, dest, ignore=shutil.ignore_patterns("*.safetensors", "model-manifest.json")
    )
    generator = torch.Generator().manual_seed(seed)
    for weights in sorted(source.rglob("*.safetensors")):
        tensors = load_file(str(weights))
        moved = {}
        for name, tensor in sorted(tensors.items()):
            if tensor.is_floating_point() and tensor.numel() > 1:
                noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
                spread = tensor.float().std().item() or 1.0
                moved[name] = (tensor.float() + noise * scale * spread).to(tensor.dtype)
            else:
                moved[name] = tensor
        target = dest / weights.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        save_file(moved, str(target), metadata={"format": "pt"})
    (dest / MARKER).write_text(
        json.dumps({"label": LABEL, "source": str(source), "scale": scale, "seed": seed})
    )
    return dest


def label_of(scale: float, seed: int) -> str:
    return f"{LABEL} (scale {scale:g}, seed {seed})"
