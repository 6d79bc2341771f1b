"""Bounded queues and tenants' limits on the real pipeline: a bucket flooded past its bound
answers `overloaded` while other buckets serve; the SDK refuses before producing once the
backlog is published; a tenant over its quota gets 429 at the gateway (the official
``openai`` SDK) while another is served; a tenant over its rate is refused by the
dispatcher, with every request answered once."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.limits.policy import TenantLimits
from headrace.limits.store import LimitsStore
from headrace.models.tokenizer import count_tokens
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.errors import ErrorCode, OverloadedError
from headrace.schemas.messages import Reply
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.gateway.gateway_proc import running_gateway
from tests.integration.topics import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MODEL = "all-MiniLM-L6-v2"
FLOOD = 1500
BOUND = 200


def replies_on(settings: Settings, topic: str) -> list[Reply]:
    return [Reply.model_validate_json(r.value) for r in read_topic(settings, topic)]


def test_a_bucket_past_its_bound_answers_overloaded_while_others_serve(stack: LocalStack) -> None:
    prefix = unique_prefix("bound")
    env = pipeline_env(
        prefix,
        HEADRACE_BUCKET_MAX_BACKLOG=json.dumps({"16": BOUND}),
        HEADRACE_MAX_BATCH_TOKENS="512",
        HEADRACE_FAULT_SLOW_MARKER="SLOWDOWN",
        HEADRACE_FAULT_SLOW_S="0.5",
        # little read ahead: the flood waits on its topic, where the published backlog shows
        # it (read ahead, the dispatcher refuses all past the bound at once, and the backlog
        # the SDK sees is soon under it: test_quotas.py covers that)
        HEADRACE_FAIR_READ_AHEAD_TOKENS="64",
    )
    settings = Settings(topic_prefix=prefix, bucket_max_backlog={16: BOUND})
    others = ",".join(str(b) for b in settings.buckets if b != 16)
    flood_topic = f"{prefix}.replies.flood"
    with (
        Pipeline(env=env, worker_buckets=["16", others]),
        Client(settings, tenant="flood", reply_topic=flood_topic, listen=False) as flood,
        Client(settings, tenant="users") as online,
    ):
        # a producer that does not check (as any Kafka client): the dispatcher must bound it
        prepared = flood.prepare([f"SLOWDOWN flood {i}" for i in range(FLOOD)])
        assert {bucket for _, bucket in prepared} == {16}
        for request, bucket in prepared:
            flood.send_nowait(request, bucket)
        flood.flush()
        longer = [f"question {i} " + "about the river and the mill " * 6 for i in range(10)]
        submissions = online.submit_many(longer)
        assert 16 not in {s.bucket for s in submissions}
        assert all(s.result(30).result is not None for s in submissions)
        answered_meanwhile = len(replies_on(settings, flood_topic))
        # once the backlog is published, the SDK refuses before producing
        deadline, refused, probes = time.monotonic() + 10, None, []
        while refused is None and time.monotonic() < deadline:
            try:
                probes.append(online.submit("SLOWDOWN probe"))
            except OverloadedError as exc:
                refused = exc
            time.sleep(0.1)
        assert refused is not None, "the client never saw the bucket overloaded"
        assert refused.retry_after_s >= 1

        def flood_answered() -> list[Reply]:
            replies = replies_on(settings, flood_topic)
            assert len(replies) >= FLOOD, f"{len(replies)} of {FLOOD} flood replies"
            return replies

        replies = eventually(flood_answered, 180, "the flood answered", every_s=0.5)
        assert all(p.result(60) for p in probes)  # the probes let through are answered
    print(f"flood replies when another bucket had answered: {answered_meanwhile} of {FLOOD}")
    assert answered_meanwhile < FLOOD  # another bucket served while 16 was flooded
    per_id = collections.Counter(r.request_id for r in replies)
    assert set(per_id) == {r.request_id for r, _ in prepared} and set(per_id.values()) == {1}
    codes = collections.Counter(r.error.code if r.error else "ok" for r in replies)
    print("flood replies by outcome:", dict(codes))
    assert set(codes) == {"ok", ErrorCode.overloaded}
    assert codes["ok"] >= BOUND  # the bound was served, not refused
    overloaded = [r.error for r in replies if r.error]
    assert all(e.retry_after_s is not None and e.retry_after_s >= 1 for e in overloaded)


@pytest.fixture
def limits(shared_settings: Settings) -> LimitsStore:
    client = connections.redis_client(shared_settings)
    return LimitsStore(client, shared_settings.topic_prefix, shared_settings.quota_window_s)


def test_a_tenant_over_its_rate_is_refused_by_the_dispatcher(
    shared_pipeline: Pipeline, shared_settings: Settings, limits: LimitsStore
) -> None:
    tenant = unique_prefix("fast")
    limits.set_limits(tenant, TenantLimits(requests_per_s=3))
    eventually(  # the dispatcher reads overrides every quarter second
        lambda: any(
            "tenant limits read:" in line and tenant in line
            for line in shared_pipeline.dispatcher.log_path.read_text().splitlines()
        ),
        10,
        f"{tenant}'s limits read by the dispatcher",
        every_s=0.1,
    )
    with Client(shared_settings, tenant=tenant) as client:
        replies = [s.result(60) for s in client.submit_many([f"burst {i}" for i in range(12)])]
    codes = collections.Counter(r.error.code if r.error else "ok" for r in replies)
    assert set(codes) == {"ok", ErrorCode.rate_limited}, codes
    assert 3 <= codes["ok"] <= 6, codes  # the sliding second may straddle two
    assert all(r.error.retry_after_s for r in replies if r.error)


@pytest.fixture
def gateway(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    env = {"HEADRACE_TOPIC_PREFIX": shared_prefix}
    with running_gateway(env, tmp_path, tenants=("small", "big")) as running:
        yield running


def test_a_tenant_over_its_quota_gets_429_at_the_gateway_and_another_is_served(
    gateway: tuple[str, dict[str, str]], limits: LimitsStore
) -> None:
    url, keys = gateway
    text = "a sentence of about a dozen tokens for the quota test"
    tokens = count_tokens(MODEL, [text])[0]
    limits.set_limits("small", TenantLimits(tokens_per_window=tokens * 3))
    time.sleep(1)
    with (
        openai.OpenAI(base_url=f"{url}/v1", api_key=keys["small"], max_retries=0) as small,
        openai.OpenAI(base_url=f"{url}/v1", api_key=keys["big"], max_retries=0) as big,
    ):
        served, refusal = 0, None
        for _ in range(6):
            try:
                small.embeddings.create(model=MODEL, input=text)
                served += 1
            except openai.RateLimitError as exc:
                refusal = exc
                break
        assert served == 3 and refusal is not None
        assert refusal.code == "insufficient_quota"
        assert int(refusal.response.headers["retry-after"]) >= 1
        for _ in range(5):
            assert len(big.embeddings.create(model=MODEL, input=text).data[0].embedding) == 384
        with pytest.raises(openai.RateLimitError):  # still over: refused again
            small.embeddings.create(model=MODEL, input=text)
    limits.clear_limits("small")
