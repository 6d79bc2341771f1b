"""``/v1/rerank`` and ``/v1/classify`` on real gateway processes, each over a pipeline
serving a random-weight sequence classifier registered from a folder (one a reranker, one a
classifier): the scores are what plain transformers computes for each pair or text, the
documents come back ranked, and requests a model cannot serve are refused by field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from headrace.config.settings import Settings
from headrace.jobs.store import JobStore
from headrace.models.register import register
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.errors import InvalidRequestError
from tests.conftest import pipeline_env, unique_prefix
from tests.gateway.gateway_proc import auth, running_gateway
from tests.models.scorers import LABELS, build_scorer, reference_scores
from tests.together import entered_together

pytestmark = pytest.mark.timeout(300)
QUERY = "where does the water go after the wheel?"
DOCUMENTS = [
    "Into the tailrace, and back to the river.",
    "The miller grinds wheat.",
    "The headrace carries water from the weir to the wheel.",
]
Served = dict[str, tuple[str, str, Path]]  # task -> (URL, API key, model folder)


@pytest.fixture(scope="module")
def served(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("scoring")
    sql = REGISTRY["url"] = f"sqlite:///{root}/registry.db"
    folders = {
        "rerank": build_scorer(root / "reranker"),
        "classify": build_scorer(root / "classifier", LABELS),
    }
    settings = Settings(sql_url=sql, state_dir=root / "state")
    for task, folder in folders.items():
        register(settings, f"test-{task}", str(folder), "v1")
        (root / task).mkdir()  # its gateway's own folder
    JobStore(sql)  # migrated once, before two gateways start on it at the same time
    with entered_together(
        Pipeline(env=env_for("rerank", sql)),
        Pipeline(env=env_for("classify", sql)),
        running_gateway(env_for("rerank", sql), root / "rerank", tenants=("acme",)),
        running_gateway(env_for("classify", sql), root / "classify", tenants=("acme",)),
    ) as (_, _, (u1, k1), (u2, k2)):
        yield {
            "rerank": (u1, k1["acme"], folders["rerank"]),
            "classify": (u2, k2["acme"], folders["classify"]),
        }


def env_for(task: str, sql: str) -> dict[str, str]:
    """The environment of the pipeline serving ``task``'s model and of its gateway."""
    prefix = PREFIXES.setdefault(task, unique_prefix(task))
    return pipeline_env(
        prefix, HEADRACE_MODEL=f"test-{task}", HEADRACE_SQL_URL=sql, HEADRACE_MAX_WAIT_MS="20"
    )


PREFIXES: dict[str, str] = {}  # one topic prefix per task's pipeline
REGISTRY: dict[str, str] = {}  # the module's SQL store (its registry): "url"


def sdk_settings(task: str) -> Settings:
    return Settings(topic_prefix=PREFIXES[task], sql_url=REGISTRY["url"])


def post(served: Served, task: str, body: dict[str, Any]) -> httpx.Response:
    url, key, _ = served[task]
    return httpx.post(f"{url}/v1/{task}", json=body, headers=auth(key), timeout=60)


def test_rerank_ranks_the_documents_by_the_model_s_scores(served: Served) -> None:
    documents: list[Any] = [DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2]]
    body = {"model": "test-rerank", "query": QUERY, "documents": documents}
    answer = post(served, "rerank", {**body, "top_n": 2, "return_documents": True})
    assert answer.status_code == 200, answer.text
    got = answer.json()
    want = reference_scores(served["rerank"][2], [QUERY] * 3, DOCUMENTS, rerank=True)[:, 0]
    best = sorted(range(3), key=lambda k: -float(want[k]))[:2]
    assert [r["index"] for r in got["results"]] == best  # best first, top_n of them
    for result in got["results"]:
        assert result["relevance_score"] == pytest.approx(float(want[result["index"]]), abs=1e-4)
        assert result["document"] == {"text": DOCUMENTS[result["index"]]}
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(served["rerank"][2]))
    pairs = [len(tokenizer(QUERY, d)["input_ids"]) for d in DOCUMENTS]
    assert got["usage"]["total_tokens"] == sum(pairs)  # what the model saw, every pair

    tei = post(served, "rerank", {"model": "test-rerank", "query": QUERY, "texts": DOCUMENTS})
    scores = {r["index"]: r["relevance_score"] for r in tei.json()["results"]}
    assert len(scores) == 3 and "document" not in tei.json()["results"][0]
    assert torch.allclose(torch.tensor([scores[k] for k in range(3)]), want, atol=1e-4)


def test_classify_gives_each_text_s_label_and_probabilities(served: Served) -> None:
    texts = [QUERY, DOCUMENTS[2]]
    answer = post(served, "classify", {"model": "test-classify", "input": texts})
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    want = reference_scores(served["classify"][2], texts, [None, None], rerank=False)
    for row, expected in zip(data, want, strict=True):
        assert row["probs"] == pytest.approx(expected.tolist(), abs=1e-4)
        assert row["label"] == LABELS[int(expected.argmax())] and row["num_classes"] == 3
    one = post(served, "classify", {"model": "test-classify", "input": texts[0]})
    assert one.json()["data"][0]["probs"] == pytest.approx(data[0]["probs"], abs=1e-5)


def test_requests_a_model_cannot_serve_are_refused_by_field(served: Served) -> None:
    wrong = post(served, "rerank", {"model": "test-classify", "query": "q", "documents": ["d"]})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "model"
    none = post(served, "rerank", {"model": "test-rerank", "query": "q"})
    assert none.status_code == 400 and "documents" in none.json()["error"]["message"]
    unknown = post(served, "classify", {"model": "gpt-9", "input": "x"})
    assert unknown.status_code == 404
    long_document = "water " * 800  # past the model's 512 tokens: refused unless cut
    refused = post(
        served, "rerank", {"model": "test-rerank", "query": QUERY, "documents": [long_document]}
    )
    assert refused.status_code == 400, refused.text
    cut = post(
        served,
        "rerank",
        {"model": "test-rerank", "query": QUERY, "documents": [long_document], "truncate": True},
    )
    assert cut.status_code == 200 and cut.json()["usage"]["total_tokens"] <= 512


def test_the_sdk_ranks_and_classifies_through_the_same_pipelines(served: Served) -> None:
    with Client(sdk_settings("rerank"), tenant="sdk") as client:
        scores = client.rerank(QUERY, DOCUMENTS, model="test-rerank")
    want = reference_scores(served["rerank"][2], [QUERY] * 3, DOCUMENTS, rerank=True)[:, 0]
    assert scores == pytest.approx(want.tolist(), abs=1e-4)
    with Client(sdk_settings("classify"), tenant="sdk") as client:
        [probs] = client.classify([QUERY], model="test-classify")
        with pytest.raises(InvalidRequestError):  # an empty second text
            client.prepare([QUERY], model="test-classify", pairs=[""])
        with pytest.raises(InvalidRequestError):  # a classifier is not a text generator
            client.generate(QUERY, model="test-classify")
    expected = reference_scores(served["classify"][2], [QUERY], [None], rerank=False)[0]
    assert list(probs) == list(LABELS)
    assert list(probs.values()) == pytest.approx(expected.tolist(), abs=1e-4)
