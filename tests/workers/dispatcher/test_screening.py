"""Whether a parsed request is the pipeline's own: its reply topic, its signature, no
replay (no IO)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Request
from headrace.schemas.signing import request_signature
from headrace.schemas.topics import Topics
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.screening import Screen

WALL = 1_800_000_000.0
KEY = b"acme-key"


def screen(**options: object) -> Screen:
    config = CoreConfig(
        dispatcher_id="d", topics=Topics("t"), buckets=(16,), served={"m": 512}, **options
    )
    return Screen(config)


def request(reply_to: str = "t.replies.default", age_s: float = 0.0) -> Request:
    return Request(
        request_id="r",
        tenant="acme",
        model="m",
        input="text",
        reply_to=reply_to,
        created_at=datetime.fromtimestamp(WALL - age_s, UTC),
    )


def test_a_reply_topic_of_the_pipeline_passes_and_any_other_is_refused_each_time() -> None:
    s = screen()
    assert s.unfit(request(), WALL) is None
    for _ in range(2):  # the second answer is the one remembered: the same
        refused = s.unfit(request(reply_to="other.replies.x"), WALL)
        assert refused is not None and refused.code is ErrorCode.invalid_schema
        assert "not a reply topic" in refused.message
    assert s.unfit(request(), WALL) is None


def test_a_reply_topic_that_does_not_exist_is_refused() -> None:
    s = screen()
    s.reply_topic_exists = lambda topic: topic != "t.replies.gone"
    refused = s.unfit(request(reply_to="t.replies.gone"), WALL)
    assert refused is not None and "does not exist" in refused.message


def test_a_tenant_that_signs_needs_its_signature_and_no_replay() -> None:
    s = screen(tenant_keys={"acme": (KEY,)}, answered_ttl_s=60)
    unsigned = s.unfit(request(), WALL)
    assert unsigned is not None and unsigned.code is ErrorCode.unauthenticated
    fresh = request()
    signed = fresh.model_copy(update={"signature": request_signature(KEY, fresh.signable())})
    assert s.unfit(signed, WALL) is None
    old = request(age_s=120)
    replay = old.model_copy(update={"signature": request_signature(KEY, old.signable())})
    refused = s.unfit(replay, WALL)
    assert refused is not None and "a replay" in refused.message
    assert s.unfit(replay, WALL - timedelta(seconds=100).total_seconds()) is None
