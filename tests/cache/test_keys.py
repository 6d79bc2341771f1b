"""Cache keys: everything that changes a result changes the key; the tenant always does.
Which results may be cached: embeddings, and generations that would repeat."""

from __future__ import annotations

from headrace.cache.keys import cache_key, entry_scopes, normalise_input
from headrace.cache.requests import cacheable
from headrace.schemas.messages import GenerationResult, Request, Usage
from headrace.schemas.params import EmbedParams, GenerateParams

BASE = ("acme", "all-MiniLM-L6-v2", "v1", "embed", "a red bicycle", EmbedParams(), None)


def key(**changes: object) -> str:
    names = ["tenant", "model", "model_version", "task", "text", "params", "input_ids"]
    args = dict(zip(names, BASE, strict=True))
    args.update(changes)
    return cache_key(**args)  # type: ignore[arg-type]


def test_every_part_of_the_request_changes_the_key() -> None:
    base = key()
    assert len(base) == 64
    variants = [
        key(tenant="globex"),
        key(model="other-model"),
        key(model_version="v2"),
        key(task="generate"),
        key(text="a blue bicycle"),
        key(params=EmbedParams(normalize=False)),
        key(params=EmbedParams(truncate=True)),
        key(text="", input_ids=[2, 3]),  # an input given as token ids is keyed by them
        key(text="", input_ids=[3, 2]),
    ]
    assert base not in variants
    assert len(set(variants)) == len(variants)


def test_whitespace_and_unicode_forms_do_not_change_the_key() -> None:
    assert key(text="  a   red\tbicycle\n") == key()
    assert normalise_input("cafe\u0301") == normalise_input("caf\u00e9")
    assert key(text="A red bicycle") != key()  # case is the model's business, not ours


def test_scopes_are_the_tenant_the_model_version_and_the_tenants_own_tags() -> None:
    scopes = entry_scopes("acme", "m", "v1", ["doc:2", "doc:1", "doc:1"])
    assert scopes == ["tenant/acme", "model/m@v1", "tenant/acme/tag/doc:1", "tenant/acme/tag/doc:2"]
    assert entry_scopes("globex", "m", "v1", ["doc:1"])[2] != scopes[2]


def test_a_prompt_keys_as_the_model_sees_it_and_a_stream_shares_its_key() -> None:
    prompt = ("acme", "lm", "v1", "generate")
    greedy = GenerateParams(max_tokens=8)
    assert cache_key(*prompt, "The  mill", greedy) != cache_key(*prompt, "The mill", greedy)
    streamed = greedy.model_copy(update={"stream": True})
    assert cache_key(*prompt, "The mill", streamed) == cache_key(*prompt, "The mill", greedy)
    longer = greedy.model_copy(update={"max_tokens": 9})
    assert cache_key(*prompt, "The mill", longer) != cache_key(*prompt, "The mill", greedy)


def generation_request(params: GenerateParams, session_id: str | None = None) -> Request:
    return Request(
        request_id="r1",
        tenant="acme",
        model="lm",
        task="generate",
        input="The mill",
        reply_to="t.replies",
        params=params,
        session_id=session_id,
    )


def test_only_generations_that_would_repeat_are_cached() -> None:
    done = GenerationResult(
        text="x", finish_reason="stop", usage=Usage(prompt_tokens=2, completion_tokens=1)
    )
    assert cacheable(generation_request(GenerateParams(temperature=0.0)), done)
    assert cacheable(generation_request(GenerateParams(temperature=1.0, seed=3)), done)
    assert not cacheable(generation_request(GenerateParams(temperature=1.0)), done)  # own seed
    assert not cacheable(generation_request(GenerateParams(), session_id="chat-1"), done)
    aborted = done.model_copy(update={"finish_reason": "abort"})
    assert not cacheable(generation_request(GenerateParams()), aborted)
