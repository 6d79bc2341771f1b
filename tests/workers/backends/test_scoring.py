"""The rerank and classify backend against plain transformers: a batch of pairs of
different lengths (padded together, segments as the tokenizer gives them) scores as each
pair does alone; labels come from the model's config; a pair past the model's length is
cut longest-first where asked and flagged otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from headrace.workers.backends.scoring import ScoreBackend
from tests.models.scorers import LABELS, build_scorer, reference_scores

QUERY = "where does the water go after the wheel?"
DOCUMENTS = [
    "Into the tailrace, and back to the river.",
    "The miller grinds wheat.",
    " ".join(["The headrace carries water from the weir to the wheel"] * 6),
]


def loaded(folder: Path, task: str) -> ScoreBackend:
    backend = ScoreBackend(folder.name, folder, 512, task=task, device="cpu")
    backend.load_weights()
    backend.build()
    return backend


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scorers")
    return {
        "rerank": build_scorer(root / "reranker"),
        "classify": build_scorer(root / "classifier", LABELS),
    }


def test_a_reranker_scores_each_pair_as_plain_transformers_does(folders: dict[str, Path]) -> None:
    backend = loaded(folders["rerank"], "rerank")
    queries = [QUERY] * len(DOCUMENTS)
    items = backend.encode_pairs(queries, list(DOCUMENTS), [False] * len(DOCUMENTS))
    assert items[0].type_ids is not None and set(items[0].type_ids) == {0, 1}  # two segments
    scores, real, padded = backend.score(items)
    want = reference_scores(folders["rerank"], queries, list(DOCUMENTS), rerank=True)
    assert torch.allclose(torch.from_numpy(scores), want, atol=1e-5), (scores, want)
    assert scores.shape == (3, 1) and backend.labels == ["score"]
    assert real == sum(i.token_count for i in items) and padded == 3 * max(
        i.token_count for i in items
    )
    assert len({round(float(s), 6) for s in scores[:, 0]}) == 3  # the documents differ


def test_a_classifier_gives_each_label_s_probability(folders: dict[str, Path]) -> None:
    backend = loaded(folders["classify"], "classify")
    texts = [QUERY, *DOCUMENTS]
    items = backend.encode_pairs(texts, [None] * len(texts), [False] * len(texts))
    scores, _, _ = backend.score(items)
    want = reference_scores(folders["classify"], texts, [None] * len(texts), rerank=False)
    assert torch.allclose(torch.from_numpy(scores), want, atol=1e-5)
    assert backend.labels == list(LABELS)
    assert torch.allclose(torch.from_numpy(scores).sum(1), torch.ones(len(texts)), atol=1e-5)


def test_a_long_pair_is_cut_longest_first_where_asked(folders: dict[str, Path]) -> None:
    backend = loaded(folders["rerank"], "rerank")
    long_document = "water " * 800
    flagged, cut = backend.encode_pairs([QUERY] * 2, [long_document] * 2, [False, True])
    assert flagged.too_long and flagged.token_count > 512
    assert cut.truncated and len(cut.ids) == 512 and cut.ids[-1] == 102
    query_ids = backend.tokenizer.encode(QUERY, add_special_tokens=False).ids
    assert cut.ids[1 : 1 + len(query_ids)] == query_ids  # the long document was cut, not it
    scores, _, _ = backend.score([cut])
    assert 0.0 < float(scores[0, 0]) < 1.0
