"""The embedding backend against a reference computed directly with transformers."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
import torch

from headrace.workers.backends.embedding import EmbeddingBackend
from tests.models.loaded import loaded_minilm
from tests.reference import cosines, reference_embeddings, reference_of_ids

TEXTS = [
    "A cat sat on the mat.",
    "Kafka topics are bucketed by sequence length so that batches waste little padding.",
    "short",
    " ".join(["a longer text about rivers, channels and the turbines they feed"] * 8),
]


@pytest.fixture(scope="module")
def backend() -> EmbeddingBackend:
    return loaded_minilm(warm_up=[16, 64])


def test_padded_batch_matches_reference(backend: EmbeddingBackend) -> None:
    encoded = backend.encode(TEXTS, [False] * len(TEXTS))
    vectors, real, padded = backend.embed(encoded, [True] * len(TEXTS))
    assert min(cosines(vectors, reference_embeddings(TEXTS))) >= 0.999
    lengths = [item.token_count for item in encoded]
    assert real == sum(lengths)
    assert padded == len(TEXTS) * max(lengths)


def test_load_stages_are_timed(backend: EmbeddingBackend) -> None:
    t = backend.timings
    assert t.load_weights_s > 0 and t.warm_up_s > 0


def test_too_long_is_flagged_unless_truncation_was_asked(backend: EmbeddingBackend) -> None:
    long_text = "word " * 700
    flagged, cut = backend.encode([long_text, long_text], [False, True])
    assert flagged.too_long and flagged.token_count > 512
    assert not cut.too_long and cut.truncated and cut.token_count == 512
    with pytest.raises(ValueError):
        backend.embed([flagged], [True])
    vectors, _, padded = backend.embed([cut], [True])
    assert len(vectors[0]) == 384 and padded == 512


def test_normalize_flag_is_per_row(backend: EmbeddingBackend) -> None:
    encoded = backend.encode(["one", "two"], [False, False])
    vectors, _, _ = backend.embed(encoded, [True, False])
    norms = [sum(x * x for x in v) ** 0.5 for v in vectors]
    assert norms[0] == pytest.approx(1.0, abs=1e-4)
    assert norms[1] != pytest.approx(1.0, abs=1e-2)


def counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    """``owner.name`` replaced by itself, counted: one entry a call."""
    calls: list[int] = []
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_batch_is_built_without_a_tensor_per_row(
    backend: EmbeddingBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = backend.encode(TEXTS * 20, [False] * len(TEXTS) * 20)
    made = counting(monkeypatch, torch, "tensor")
    vectors, real, _ = backend.embed(encoded, [True] * len(encoded))
    assert len(vectors) == len(encoded) and real == sum(len(e.ids) for e in encoded)
    assert len(made) <= 1, f"{len(made)} tensors for {len(encoded)} rows"  # the normalize flags


def test_a_batch_is_one_forward_pass_under_the_pulse(backend: EmbeddingBackend) -> None:
    """The stall watch reads it: one pass per batch, ended with its host copy."""
    _, before = backend.pulse.read()
    backend.embed(backend.encode(TEXTS, [False] * len(TEXTS)), [True] * len(TEXTS))
    assert backend.pulse.read() == (0, before + 1)


def test_token_ids_are_embedded_as_given_not_decoded(backend: EmbeddingBackend) -> None:
    """ "wa" + "##ter" decodes to "water", one token when tokenized: the ids as given are
    what the model sees, between [CLS] and [SEP], as plain transformers embeds them."""
    vocab = backend.tokenizer.get_vocab()
    split = [vocab["the"], vocab["wa"], vocab["##ter"], vocab["rises"]]
    canonical = backend.tokenizer.encode("the water rises", add_special_tokens=False).ids
    assert backend.tokenizer.decode(split) == "the water rises" and canonical != split
    items = backend.encode_ids([split, canonical], [False, False])
    assert items[0].ids == [101, *split, 102] and items[0].token_count == len(split) + 2
    vectors, _, _ = backend.embed(items, [True, True])
    assert min(cosines(vectors, reference_of_ids([split, canonical]))) >= 0.999
    text = reference_embeddings(["the water rises"])
    assert cosines(vectors[1:], text)[0] >= 0.999  # a text's own ids: the text's vector
    assert cosines(vectors[:1], text)[0] < 0.99  # other ids: not the decoded text's vector
    long_row = [vocab["wa"]] * 600
    flagged, cut = backend.encode_ids([long_row, long_row], [False, True])
    assert flagged.too_long and flagged.token_count == 602
    assert cut.truncated and cut.ids[-1] == 102 and len(cut.ids) == backend.max_tokens


def test_a_forward_pass_checks_no_signature_and_gives_the_same_vectors(
    backend: EmbeddingBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers' feed-forward chunking checked every layer's arity with
    ``inspect.signature`` on every pass (``backends.chunking``): none now, same vectors."""
    from transformers import pytorch_utils
    from transformers.models.bert import modeling_bert

    encoded = backend.encode(TEXTS, [False] * len(TEXTS))
    checked = counting(monkeypatch, inspect, "signature")
    fast, _, _ = backend.embed(encoded, [True] * len(encoded))
    assert checked == []
    # transformers' own function, for comparison: it checks (so the count above can fail)
    monkeypatch.setattr(
        modeling_bert, "apply_chunking_to_forward", pytorch_utils.apply_chunking_to_forward
    )
    slow, _, _ = backend.embed(encoded, [True] * len(encoded))
    assert len(checked) >= 6  # a check a layer: MiniLM has six
    assert np.allclose(np.asarray(fast), np.asarray(slow), atol=1e-6)
