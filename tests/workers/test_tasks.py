"""The batch as a Celery task message on the machine's real Redis (127.0.0.1:6379): JSON,
the batch in the body, and headers that name the batch instead of repeating its texts."""

from __future__ import annotations

import base64
import json
import time
import uuid

import redis

from headrace.config.settings import Settings
from headrace.schemas.messages import Batch, BatchItem, RecordRef, Request
from headrace.workers.tasks import TASK_NAME, batch_of, batch_sender


def test_a_batch_goes_out_as_json_whose_headers_name_it_without_its_texts() -> None:
    url = "redis://127.0.0.1:6379/0"
    queue = f"t-tasks-{uuid.uuid4().hex[:8]}"
    request = Request(
        request_id="r1",
        tenant="acme",
        model="all-MiniLM-L6-v2",
        input="a secret sentence",
        reply_to="replies",
        token_count=4,
    )
    item = BatchItem(
        request=request, ref=RecordRef(topic="t", partition=0, offset=3), arrived_at=1.0
    )
    batch = Batch(
        batch_id="b-1", bucket=16, dispatcher_id="d1", dispatched_at=time.time(), items=[item]
    )
    batch_sender(Settings(redis_url=url))(batch, queue)
    client = redis.Redis.from_url(url)
    try:
        raw = client.lpop(queue)
        # sent through the anonymous exchange without declaring the queue: no binding of
        # kombu's was written (the declaration cost a quarter of the send); the worker that
        # consumes the queue declares it
        bindings = client.keys(f"_kombu.binding.{queue}*")
    finally:
        client.delete(queue)
    assert bindings == []
    assert isinstance(raw, bytes)
    message = json.loads(raw)
    assert message["content-type"] == "application/json"
    assert message["headers"]["task"] == TASK_NAME
    assert message["headers"]["argsrepr"] == "batch b-1"
    assert "secret" not in json.dumps(message["headers"])
    assert "secret" not in json.dumps(message["properties"])
    # the body: [args, kwargs, embed], the one argument the batch as a JSON string, which the
    # worker reads back whole; a batch sent as an object (older dispatchers) reads the same
    body = json.loads(base64.b64decode(message["body"]))
    (payload,), kwargs, _ = body
    assert isinstance(payload, str) and kwargs == {}
    assert batch_of(payload) == batch
    assert batch_of(batch.model_dump(mode="json")) == batch
