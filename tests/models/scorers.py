"""TEST MODELS for rerank and classify: random-weight BERT sequence classifiers (two small
layers) on all-MiniLM-L6-v2's tokenizer, saved as a Hugging Face folder that registers like
any other (its config says ``BertForSequenceClassification``: one label is a reranker,
several a classifier). Their scores mean nothing; what tests check is that the pipeline
computes what plain transformers computes."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from headrace.models.registry import model_spec

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)
LABELS = ("weir", "race", "wheel")


def build_scorer(folder: Path, labels: tuple[str, ...] = ()) -> Path:
    """A reranker (no ``labels``: one output) or a classifier of ``labels`` in ``folder``."""
    from transformers import BertConfig, BertForSequenceClassification

    minilm = model_spec("all-MiniLM-L6-v2").path
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm / name, folder / name)
    named = {i: label for i, label in enumerate(labels)} if labels else {0: "LABEL_0"}
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        initializer_range=0.3,  # scores spread over 0..1, not all near 0.5
        num_labels=len(named),
        id2label=named,
        label2id={v: k for k, v in named.items()},
    )
    torch.manual_seed(7)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    return folder


def reference_scores(
    folder: Path, texts: list[str], pairs: list[str | None], rerank: bool
) -> torch.Tensor:
    """Plain transformers, one input at a time (no padding): sigmoid of a reranker's logit,
    softmax of a classifier's."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    rows = []
    with torch.inference_mode():
        for text, pair in zip(texts, pairs, strict=True):
            logits = model(**tokenizer(text, pair, return_tensors="pt")).logits[0]
            rows.append(torch.sigmoid(logits[:1]) if rerank else torch.softmax(logits, dim=-1))
    return torch.stack(rows)
