"""The degradation ladder through the whole pipeline, on the real services: the one worker
is killed (kill -9); then a request whose cached result has expired is answered from the
cache (stale, marked so), one never computed gets the model's canned answer, an opted-out
tenant gets the typed ``unavailable``; a new worker comes up and requests are computed
again, with no degraded marker (automatic recovery). Every reply is counted on the topic."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from headrace.cache.requests import request_key
from headrace.config.cache_policy import DEFAULT_CLASSES
from headrace.config.settings import Settings
from headrace.models.registry import serving_version
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Reply
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(300)

CANNED = {"embedding": [0.0] * 384, "token_count": 0}
BRIEF_S = 2.0  # the entry class whose results expire before the ladder reads them


def test_without_workers_the_ladder_serves_a_stale_cached_result_then_the_canned_answer(
    stack: LocalStack,
) -> None:
    prefix = unique_prefix("ladder")
    classes = {name: p.model_dump() for name, p in DEFAULT_CLASSES.items()}
    classes["brief"] = {"mode": "ttl", "ttl_s": BRIEF_S}
    env = pipeline_env(
        prefix,
        HEADRACE_WORKER_HEARTBEAT_S="0.3",
        HEADRACE_DEGRADE_AFTER_S="1",
        HEADRACE_CACHE_CLASSES=json.dumps(classes),
        HEADRACE_DEGRADE_CANNED=json.dumps({"all-MiniLM-L6-v2": CANNED}),
        HEADRACE_DEGRADE_OPT_OUT=json.dumps(["strict"]),
    )
    settings = Settings(
        topic_prefix=prefix, cache_enabled=True, cache_classes=classes, cache_l1_max_bytes=0
    )
    seen = f"a sentence the worker computed {uuid.uuid4().hex[:6]}"
    with Pipeline(env=env, worker_buckets=["all"]) as pipeline:
        with Client(settings, tenant="acme") as client:
            submission = client.submit(seen, cache_class="brief")
            computed = submission.result(120)
            assert computed.result is not None and computed.degraded is None
            # the worker writes L3 in the background: the stale rung reads it there, so the
            # kill waits for it (on a slow machine the reply came first, and the kill lost it)
            key = request_key(submission.request, serving_version(settings, submission.request))
            l3 = client.cache.l3 if client.cache is not None else None
            assert l3 is not None
            eventually(lambda: l3.get(key) is not None, 30, "the computed result in L3")
            pipeline.workers[0].kill()
            time.sleep(max(BRIEF_S, 1 + 3 * 0.3) + 1.0)  # expired, and the bucket degraded

            stale = client.submit(seen, cache_class="brief").result(30)
            assert stale.degraded is not None, stale
            assert (stale.degraded.rung, stale.degraded.reason) == ("cache", "no_workers")
            assert stale.degraded.stale and stale.cache_tier == "l3"
            assert stale.result == computed.result

            fresh_text = f"a sentence never computed {uuid.uuid4().hex[:6]}"
            canned = client.submit(fresh_text, cache_class="brief").result(30)
            assert canned.degraded is not None and canned.degraded.rung == "canned"
            assert canned.result is not None and canned.result.embedding == CANNED["embedding"]

        with Client(settings, tenant="strict") as strict:
            refused = strict.submit(seen).result(30)
            assert refused.degraded is None and refused.error is not None
            assert refused.error.code is ErrorCode.unavailable

        pipeline.add_worker("all")  # back: computed again, nothing marked
        with Client(settings.model_copy(update={"cache_enabled": False}), tenant="acme") as c:

            def computed() -> Reply | None:  # once the dispatcher saw the new worker's beat
                again = c.submit(f"after recovery {uuid.uuid4().hex[:6]}").result(60)
                return again if again.degraded is None else None

            again = eventually(computed, 60, "a reply computed again", every_s=0.5)
            assert again.result is not None and again.batch
