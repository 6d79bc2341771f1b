"""The semantic cache's index on a real Redis (what one process adds, another finds) and the
rule that picks the neighbour to serve."""

from __future__ import annotations

import uuid

import numpy as np

from headrace import connections
from headrace.cache.semantic import (
    Neighbour,
    SemanticIndex,
    choose,
    semantic_key,
    semantic_scope,
)
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.messages import Request
from headrace.schemas.params import GenerateParams


def unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_prompt_one_process_adds_another_finds_nearest_first(stack: LocalStack) -> None:
    settings = Settings()
    prefix = f"t-semantic-{uuid.uuid4().hex[:6]}"
    writer = SemanticIndex(connections.redis_client(settings), prefix)
    reader = SemanticIndex(connections.redis_client(settings), prefix)
    assert reader.search("s", unit(1, 0, 0)) == []  # nothing yet
    writer.add("s", unit(1, 0, 0), "about cats", "k-cats")
    writer.add("s", unit(0, 1, 0), "about dogs", "k-dogs")
    writer.add("other", unit(1, 0, 0), "another scope", "k-other")
    found = reader.search("s", unit(0.9, 0.1, 0))
    assert [n.key for n in found] == ["k-cats", "k-dogs"]  # only its scope, nearest first
    assert found[0].similarity > 0.99 and found[1].similarity < 0.2
    writer.add("s", unit(0.9, 0.1, 0), "about kittens", "k-kittens")  # read on the next search
    assert reader.search("s", unit(0.9, 0.1, 0))[0].key == "k-kittens"
    reader.drop("s")
    assert reader.search("s", unit(1, 0, 0)) == []


def test_the_nearest_neighbour_past_the_threshold_that_no_guard_refuses_is_served() -> None:
    near_negated = Neighbour(0.97, "Is the river not safe?", "k1")
    near = Neighbour(0.95, "Is the river safe?", "k2")
    far = Neighbour(0.80, "Is the river safe today?", "k3")
    choice = choose("Is the river safe?", [far, near, near_negated], threshold=0.9)
    assert choice.served == near and [why for _, why in choice.refused] == ["negation"]
    assert choose("Is the river safe?", [far], threshold=0.9).served is None


def test_a_scope_holds_everything_but_the_prompt() -> None:
    def request(**fields: object) -> Request:
        base: dict[str, object] = {
            "request_id": uuid.uuid4().hex,
            "tenant": "acme",
            "model": "lm",
            "task": "generate",
            "input": "a prompt",
            "reply_to": "t.replies.default",
            "params": GenerateParams(max_tokens=8),
        }
        return Request.model_validate({**base, **fields})

    scope = semantic_scope(request(), "v1")
    assert semantic_scope(request(input="another prompt"), "v1") == scope
    assert semantic_scope(request(tenant="other"), "v1") != scope
    assert semantic_scope(request(), "v2") != scope
    assert semantic_scope(request(params=GenerateParams(max_tokens=9)), "v1") != scope
    assert semantic_key(scope, "a") != semantic_key(scope, "b")
