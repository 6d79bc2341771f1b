"""Bad input fuzzed with hypothesis, straight onto the request topics of a running pipeline:
random bytes, huge strings, wrong types, deep nesting and duplicate ids, mixed with valid
requests. Every request id that can be read gets exactly one reply; the dispatcher lives on."""

from __future__ import annotations

import collections
import json
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headrace.config.settings import Settings
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.messages import Reply, Request
from headrace.schemas.topics import Topics
from headrace.transport.kafka import clients as kafka_clients
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.integration.topics import read_topic

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def fuzz_pipeline(stack: object) -> Iterator[tuple[Pipeline, Settings]]:
    """Its own pipeline: fuzzed records must not land on other tests' topics."""
    prefix = unique_prefix("fuzz")
    with Pipeline(env=pipeline_env(prefix)) as pipeline:
        yield pipeline, Settings(topic_prefix=prefix)


Record = tuple[bytes, str | None]  # the bytes, and the request id a reply must carry (if any)


def build(kind: str, payload: object, reply_to: str, dup: int) -> Record:
    rid = f"fz-{uuid.uuid4().hex}"
    readable = {"request_id": rid, "tenant": "fuzz", "reply_to": reply_to}
    if kind == "valid":  # duplicates share one of three ids
        rid = f"fz-dup-{reply_to[-8:]}-{dup}"
        request = Request(
            request_id=rid,
            tenant="fuzz",
            model="all-MiniLM-L6-v2",
            input=f"valid request {dup}",
            reply_to=reply_to,
        )
        return request.model_dump_json().encode(), rid
    if kind == "bytes":
        assert isinstance(payload, bytes)
        return payload, None
    if kind == "huge":
        return json.dumps({**readable, "input": "x" * 400_000}).encode(), rid  # > 256 KiB
    if kind == "deep":
        depth = int(str(payload))
        return json.dumps(readable)[
            :-1
        ].encode() + b', "input": ' + b"[" * depth + b"]" * depth + b"}", (
            rid if depth < 500 else None  # deeper than Python's JSON parser goes: unreadable
        )
    return json.dumps({**readable, "input": payload}).encode(), rid  # wrong type


records = st.lists(
    st.one_of(
        st.tuples(st.just("valid"), st.none(), st.integers(0, 2)),
        st.tuples(st.just("bytes"), st.binary(min_size=1, max_size=200), st.just(0)),
        st.tuples(st.just("huge"), st.none(), st.just(0)),
        st.tuples(st.just("deep"), st.sampled_from([3, 100, 100_000]), st.just(0)),
        st.tuples(
            st.just("wrong"),
            st.one_of(st.integers(), st.lists(st.integers(), max_size=3), st.none(), st.booleans()),
            st.just(0),
        ),
    ),
    min_size=10,
    max_size=30,
)


@given(records)
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_fuzzed_records_get_one_reply_each(
    fuzz_pipeline: tuple[Pipeline, Settings], specs: list[tuple[str, object, int]]
) -> None:
    pipeline, conf = fuzz_pipeline
    reply_to = Topics(conf.topic_prefix).replies(f"fuzz-{uuid.uuid4().hex[:8]}")
    with Client(conf, tenant="fuzz", reply_topic=reply_to) as client:
        built = [build(kind, payload, reply_to, dup) for kind, payload, dup in specs]
        producer = kafka_clients.producer(conf)
        topics = Topics(conf.topic_prefix)
        for i, (raw, _) in enumerate(built):
            producer.send(topics.requests(conf.buckets[i % 3]), value=raw)
        producer.flush()
        producer.close()
        expected = {rid for _, rid in built if rid is not None}

        def answered() -> collections.Counter[str]:
            counts = collections.Counter(
                Reply.model_validate_json(r.value).request_id for r in read_topic(conf, reply_to)
            )
            assert set(counts) == expected, f"missing {expected - set(counts)}"
            return counts

        counts = eventually(answered, 60, "a reply to every well-formed record")
        assert max(counts.values(), default=1) == 1, counts.most_common(3)
        assert pipeline.dispatcher.alive()
        assert client.submit("alive after the fuzz").result(30).result is not None
