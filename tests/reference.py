"""Reference embeddings computed directly with transformers: all-MiniLM-L6-v2, one text at a
time (no padding), mean pooling over the attention mask, L2 normalisation."""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from headrace.models.registry import model_spec


@cache
def _model() -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    path = str(model_spec("all-MiniLM-L6-v2").path)
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def reference_embeddings(texts: list[str]) -> torch.Tensor:
    tokenizer, model = _model()
    rows = []
    with torch.inference_mode():
        for text in texts:
            encoded = tokenizer(text, return_tensors="pt")
            hidden = model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            rows.append(torch.nn.functional.normalize(pooled, dim=1)[0])
    return torch.stack(rows)


def reference_of_ids(rows: list[list[int]]) -> torch.Tensor:
    """The same, of inputs given as token ids: [CLS], the ids, [SEP], nothing decoded."""
    tokenizer, model = _model()
    out = []
    with torch.inference_mode():
        for row in rows:
            ids = torch.tensor([[tokenizer.cls_token_id, *row, tokenizer.sep_token_id]])
            hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            out.append(torch.nn.functional.normalize(hidden.mean(1), dim=1)[0])
    return torch.stack(out)


def cosines(a: list[list[float]], b: torch.Tensor) -> list[float]:
    got = torch.tensor(a)
    return torch.nn.functional.cosine_similarity(got, b, dim=1).tolist()
