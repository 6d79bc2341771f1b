"""The result cache through the whole pipeline: a miss is computed and written through by the
worker; the same request again is answered from L2, then L1, without touching a request
topic; an invalidated tag is computed again; a result is never written for a request older
than an invalidation of its tag."""

from __future__ import annotations

import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.errors import InvalidRequestError
from headrace.schemas.topics import Topics
from tests.integration.topics import read_topic
from tests.reference import cosines, reference_embeddings

pytestmark = pytest.mark.timeout(240)


def request_records(settings: Settings) -> int:
    topics = Topics(settings.topic_prefix)
    return sum(len(read_topic(settings, topics.requests(b))) for b in settings.buckets)


def test_hits_skip_the_pipeline_and_tags_invalidate(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    settings = shared_settings.model_copy(update={"cache_enabled": True})
    tenant = f"cache-{uuid.uuid4().hex[:6]}"
    text = f"cached sentence {uuid.uuid4().hex[:6]} about water channels"
    with Client(settings, tenant=tenant) as client:
        miss = client.submit(text, tags=["doc:1"], cache_class="tagged").result(120)
        assert miss.result is not None and miss.cache_tier is None and miss.batch is not None
        sent = request_records(settings)
        l2 = client.submit(text, tags=["doc:1"], cache_class="tagged").result(5)
        l1 = client.submit(text, tags=["doc:1"], cache_class="tagged").result(5)
        assert (l2.cache_tier, l1.cache_tier) == ("l2", "l1")
        assert l1.result == l2.result == miss.result
        assert request_records(settings) == sent  # hits never reached a request topic
        assert min(cosines([l1.result.embedding], reference_embeddings([text]))) >= 0.999

        # invalidate the tag: the next request is computed again (and cached again)
        assert client.cache is not None
        client.cache.invalidate(scopes=[f"tenant/{tenant}/tag/doc:1"])
        again = client.submit(text, tags=["doc:1"], cache_class="tagged").result(120)
        assert again.cache_tier is None and again.batch is not None
        assert client.submit(text, tags=["doc:1"], cache_class="tagged").result(5).cache_tier

        # another tenant with the same text is never served this tenant's entry
        with Client(settings, tenant=f"{tenant}-other") as other:
            assert other.submit(text, tags=["doc:1"]).result(120).cache_tier is None

        with pytest.raises(InvalidRequestError):
            client.submit(text, cache_class="no-such-class")


def test_a_result_computed_across_an_invalidation_is_not_cached(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    settings = shared_settings.model_copy(update={"cache_enabled": True})
    tenant = f"race-{uuid.uuid4().hex[:6]}"
    text = f"raced sentence {uuid.uuid4().hex[:6]}"
    with Client(settings, tenant=tenant) as client:
        assert client.cache is not None
        # submitted (its generations read), then its tag is invalidated before the worker
        # writes: prepare + send happen first, the invalidation right after
        ((request, bucket),) = client.prepare([text], tags=["doc:7"], cache_class="tagged")
        submission = client.send(request, bucket)
        client.cache.invalidate(scopes=[f"tenant/{tenant}/tag/doc:7"])
        client.flush()
        assert submission.result(120).result is not None
        assert (
            client.submit(text, tags=["doc:7"], cache_class="tagged").result(120).cache_tier is None
        )
