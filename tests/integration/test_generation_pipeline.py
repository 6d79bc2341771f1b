"""Generation through the whole pipeline (tansu, Redis, a dispatcher and a Celery worker
hosting headrace-test-lm, the locally built TEST MODEL): greedy output equals the model's
own decoding of each prompt, a stream gives the text in order and once, and bad requests
get typed errors."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator

import pytest

from headrace import connections
from headrace.cache.keys import tenant_scope
from headrace.cache.semantic import semantic_scope
from headrace.config.settings import Settings
from headrace.config.tag_rules import TagRule
from headrace.consumers.invalidation import Invalidator
from headrace.models import tiny_lm
from headrace.models.registry import serving_version
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.errors import InputTooLongError, InvalidRequestError
from headrace.schemas.messages import GenerationResult, Reply
from headrace.schemas.params import GenerateParams
from headrace.sessions.prompt import exchange, render_prompt
from headrace.sessions.store import SessionStore
from headrace.transport.kafka import clients as kafka_clients
from headrace.workers.backends.generation import GenerationBackend
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.tiny_model import load_test_lm

pytestmark = pytest.mark.timeout(300)

PROMPTS = [
    "The headrace",
    "Water leaves the river at the weir and runs along the channel to the wheel",
    "A sluice at the head of the channel",
]


PREFIX = unique_prefix("generate")


@pytest.fixture(scope="module")
def pipeline(stack: object) -> Iterator[Pipeline]:
    env = pipeline_env(PREFIX, HEADRACE_MODEL=tiny_lm.NAME, HEADRACE_MAX_WAIT_MS="50")
    with Pipeline(env=env) as running:
        yield running


@pytest.fixture(scope="module")
def client(pipeline: Pipeline) -> Iterator[Client]:
    settings = Settings(topic_prefix=PREFIX, model=tiny_lm.NAME)
    with Client(settings, tenant="gen") as c:
        yield c


def test_the_worker_reports_its_memory_plan(pipeline: Pipeline) -> None:
    loaded = next(
        line
        for line in pipeline.workers[0].log_path.read_text().splitlines()
        if line.startswith("LOADED ")
    )
    health = json.loads(loaded.removeprefix("LOADED "))
    assert health["model"] == tiny_lm.NAME
    plan = health["plan"]
    assert plan["max_sequences"] > 0 and plan["kv_tokens"] > 0 and not plan["measured"]
    assert plan["bucket_rows"]["16"] > plan["bucket_rows"]["512"] > 0


@pytest.fixture(scope="module")
def local() -> GenerationBackend:
    return load_test_lm()


def test_greedy_generation_matches_the_model(client: Client, local: GenerationBackend) -> None:
    submissions = [
        client._submit_generation(p, None, None, GenerateParams(max_tokens=12)) for p in PROMPTS
    ]
    replies = [s.result(120) for s in submissions]
    expected = local.generate(
        local.encode(PROMPTS, [False] * len(PROMPTS)), [GenerateParams(max_tokens=12)] * 3
    )
    for reply, want in zip(replies, expected, strict=True):
        assert isinstance(reply.result, GenerationResult), reply.error
        assert reply.result.text == want.text
        assert reply.result.finish_reason == want.finish_reason
        assert reply.result.usage.completion_tokens == want.completion_tokens
        assert reply.batch is not None and reply.timings is not None
    again = client.generate(PROMPTS[1], max_tokens=12)
    assert again.text == expected[1].text  # deterministic


def test_a_stream_gives_the_text_in_order_once(client: Client) -> None:
    async def collect() -> list[str]:
        return [piece async for piece in client.stream(PROMPTS[0], max_tokens=24)]

    pieces = asyncio.run(collect())
    whole = client.generate(PROMPTS[0], max_tokens=24)
    assert "".join(pieces) == whole.text
    assert len(pieces) > 1  # streamed, not one piece at the end


def test_a_short_request_sent_during_a_long_one_is_answered_first(client: Client) -> None:
    """Continuous batching: the worker holds several batches and their rows share one decode
    loop, so a short request does not wait for a long one sent before it to finish (batched
    statically it would: one batch at a time, each to its end)."""
    short_done_first: list[bool] = []

    async def long_with_a_short_one_sent_meanwhile() -> list[str]:
        pieces: list[str] = []
        short = None
        async for piece in client.stream(PROMPTS[1], max_tokens=256):
            pieces.append(piece)
            if short is None:  # the long one is decoding
                short = client.submit_generation(PROMPTS[0], max_tokens=8)
        assert short is not None
        short_done_first.append(short.future.done())
        assert short.result(60).result is not None
        return pieces

    pieces = asyncio.run(long_with_a_short_one_sent_meanwhile())
    assert len(pieces) > 1
    long_reply = client.generate(PROMPTS[1], max_tokens=256)
    assert long_reply.usage.completion_tokens == 256, "the test model must not stop early here"
    assert short_done_first == [True]


def test_sampling_is_seeded_and_stops_where_asked(client: Client) -> None:
    hot = {"max_tokens": 16, "temperature": 1.2, "top_p": 0.9, "seed": 11}
    assert client.generate(PROMPTS[2], **hot).text == client.generate(PROMPTS[2], **hot).text
    free = client.generate(PROMPTS[1], max_tokens=20).text
    stop = free[len(free) // 2 : len(free) // 2 + 2]
    cut = client.generate(PROMPTS[1], max_tokens=20, stop=[stop])
    assert cut.finish_reason == "stop" and cut.text == free[: free.find(stop)]


def test_bad_generation_requests_get_typed_errors(client: Client) -> None:
    with pytest.raises(InputTooLongError):
        client.generate(" the wheel" * 400)
    truncated = client.generate(" the wheel" * 400, truncate=True, max_tokens=4)
    assert truncated.truncated and truncated.usage.prompt_tokens == tiny_lm.MAX_POSITIONS - 1
    with pytest.raises(InvalidRequestError, match=r"serves 'embed'"):
        client.generate("hi", model="all-MiniLM-L6-v2")
    with pytest.raises(ValueError):
        client.generate("hi", max_tokens=0)


def test_a_session_carries_the_conversation(client: Client, local: GenerationBackend) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    first = client.generate("The headrace", max_tokens=6, session_id=sid)
    second = client.generate("A sluice", max_tokens=6, session_id=sid)
    transcript = render_prompt(exchange("r", "The headrace", first.text), "A sluice")
    [want] = local.generate(local.encode([transcript], [False]), [GenerateParams(max_tokens=6)])
    assert second.text == want.text  # the history came first in its prompt
    assert second.usage.prompt_tokens == want.prompt_tokens
    settings = client.settings
    store = SessionStore(
        connections.redis_client(settings),
        connections.s3_client(settings),
        settings.sessions_s3_bucket,
        settings.topic_prefix,
    )
    session = store.get("gen", sid)
    assert session.version == 2
    assert [t.content for t in session.turns] == [
        "The headrace",
        first.text,
        "A sluice",
        second.text,
    ]
    with pytest.raises(ValueError, match="session_id is for generate"):
        client.prepare(["hi"], model="all-MiniLM-L6-v2", session_id=sid)


def test_a_deterministic_generation_is_served_from_the_cache_and_streams_from_it(
    pipeline: Pipeline,
) -> None:
    settings = Settings(topic_prefix=PREFIX, model=tiny_lm.NAME, cache_enabled=True)
    prompt = f"The wheel turns {uuid.uuid4().hex[:6]}"
    with Client(settings, tenant="cached") as cached:
        first = cached.submit_generation(prompt, max_tokens=10).result(120)
        assert isinstance(first.result, GenerationResult) and first.cache_tier is None

        def hit() -> Reply | None:
            reply = cached.submit_generation(prompt, max_tokens=10).result(60)
            return reply if reply.cache_tier is not None else None

        again = eventually(hit, 10, "the generation from the cache")
        assert again.result == first.result  # the same text, finish reason and usage

        async def streamed() -> list[str]:
            return [piece async for piece in cached.stream(prompt, max_tokens=10)]

        assert "".join(asyncio.run(streamed())) == first.result.text  # replayed from it
        sampled = [
            cached.submit_generation(prompt, max_tokens=10, temperature=1.0).result(120)
            for _ in range(2)
        ]
        assert [r.cache_tier for r in sampled] == [None, None]  # would not repeat: computed


def test_a_near_prompt_is_answered_from_the_semantic_cache_and_a_negated_one_is_not(
    pipeline: Pipeline,
) -> None:
    """Sampled (temperature 0.8): the exact cache would never serve it; the semantic cache
    serves a rewording of the prompt once its tenant and the request opt in."""
    settings = Settings(
        topic_prefix=PREFIX, model=tiny_lm.NAME, cache_enabled=True, cache_semantic_tenants=["near"]
    )
    prompt = f"How do I reset the password of account {uuid.uuid4().hex[:6]}?"
    sample = {"max_tokens": 8, "temperature": 0.8}
    with Client(settings, tenant="near") as client, Client(settings, tenant="far") as far:
        asked = client.submit_generation(prompt, semantic=True, **sample)
        first = asked.result(120)
        assert first.cache_tier is None and isinstance(first.result, GenerationResult)
        semantic = client.semantic
        assert semantic is not None
        scope = semantic_scope(asked.request, serving_version(settings, asked.request))
        eventually(lambda: semantic.index.size(scope) == 1, 10, "the answer remembered")

        reworded = f"Can you explain this: {prompt}"
        served = client.submit_generation(reworded, semantic=True, **sample).result(120)
        assert served.result == first.result and served.cache_tier is not None
        assert served.semantic_similarity is not None
        assert served.semantic_similarity >= settings.cache_semantic_threshold

        negated = prompt.replace("How do I reset", "Why can I not reset")
        computed = [
            client.submit_generation(negated, semantic=True, **sample).result(120),
            client.submit_generation(reworded, **sample).result(120),  # not asked for
            far.submit_generation(reworded, semantic=True, **sample).result(120),  # no opt-in
        ]
        assert [r.semantic_similarity for r in computed] == [None, None, None]
        assert all(r.cache_tier is None for r in computed)

        # an invalidation of the tenant's entries (an upstream event's, as any) takes the
        # answer away: the rewording is computed
        assert client.cache is not None
        client.cache.invalidate(scopes=[tenant_scope("near")])
        again = client.submit_generation(reworded, semantic=True, **sample).result(120)
        assert again.semantic_similarity is None and again.cache_tier is None


def test_an_upstream_event_evicts_a_cached_generation(pipeline: Pipeline) -> None:
    """A deterministic generation tagged ``doc:<id>`` is served from the cache after an
    identical one, until an event on an upstream topic (``headrace invalidator``'s rule maps
    it to the tag) evicts it: the next one is computed."""
    upstream = f"{PREFIX}.docs.changes"
    rule = TagRule(topic=upstream, tag="doc:{id}", tenant="evicted", fields={"id": "id"})
    settings = Settings(
        topic_prefix=PREFIX, model=tiny_lm.NAME, cache_enabled=True, cache_tag_rules=[rule]
    )
    prompt = f"The sluice gate {uuid.uuid4().hex[:6]}"
    invalidator = Invalidator(settings)
    stop = threading.Event()
    thread = threading.Thread(target=invalidator.run, args=(stop,), daemon=True)
    thread.start()
    try:
        with Client(settings, tenant="evicted") as client:

            def generate() -> Reply:
                ((request, bucket),) = client.prepare(
                    [prompt],
                    generation=GenerateParams(max_tokens=8),
                    tags=["doc:42"],
                    cache_class="tagged",
                )
                submission = client.send(request, bucket)
                client.flush()
                return submission.result(120)

            def cached(want: bool) -> Reply | None:
                reply = generate()
                return reply if (reply.cache_tier is not None) == want else None

            first = generate()
            assert first.cache_tier is None
            hit = eventually(lambda: cached(True), 10, "the generation from the cache")
            assert hit.result == first.result
            producer = kafka_clients.producer(settings)
            producer.send(upstream, json.dumps({"id": 42}).encode())
            producer.flush()
            producer.close()
            again = eventually(lambda: cached(False), 10, "the entry evicted")
            assert again.result == first.result  # greedy: computed again, the same text
    finally:
        stop.set()
        thread.join(timeout=10)
