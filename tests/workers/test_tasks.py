"""The batch as a Celery task message on the machine's real Redis (127.0.0.1:6379): the
batch's JSON in the body as it is (framed, not quoted), headers that name the batch
instead of repeating its texts, and a worker's Celery reading it back."""

from __future__ import annotations

import base64
import json
import time
import uuid

import redis
from kombu.serialization import loads, prepare_accept_content

from headrace.config.settings import Settings
from headrace.schemas.messages import Batch, BatchItem, RecordRef, Request
from headrace.schemas.wire import batch_body
from headrace.workers import task_body
from headrace.workers.tasks import TASK_NAME, batch_of, batch_sender, celery_app


def test_a_batch_goes_out_as_json_whose_headers_name_it_without_its_texts() -> None:
    url = "redis://127.0.0.1:6379/0"
    queue = f"t-tasks-{uuid.uuid4().hex[:8]}"
    request = Request(
        request_id="r1",
        tenant="acme",
        model="all-MiniLM-L6-v2",
        input='a secret sentence, "quoted", über',
        reply_to="replies",
        token_count=4,
    )
    item = BatchItem(
        request=request, ref=RecordRef(topic="t", partition=0, offset=3), arrived_at=1.0
    )
    batch = Batch(
        batch_id="b-1", bucket=16, dispatcher_id="d1", dispatched_at=time.time(), items=[item]
    )
    batch_sender(Settings(redis_url=url), framed=lambda: True)(batch, queue)  # workers read it
    batch_sender(Settings(redis_url=url))(batch, queue)  # no word of the workers: plain JSON
    client = redis.Redis.from_url(url)
    try:
        raw = client.rpop(queue)  # the first sent (kombu pushes on the left)
        plain = client.rpop(queue)
        # sent through the anonymous exchange without declaring the queue: no binding of
        # kombu's was written (the declaration cost a quarter of the send); the worker that
        # consumes the queue declares it
        bindings = client.keys(f"_kombu.binding.{queue}*")
    finally:
        client.delete(queue)
    assert bindings == []
    assert isinstance(raw, bytes)
    message = json.loads(raw)
    assert message["content-type"] == task_body.CONTENT_TYPE
    assert message["headers"]["task"] == TASK_NAME
    assert message["headers"]["argsrepr"] == "batch b-1"
    assert "secret" not in json.dumps(message["headers"])
    assert "secret" not in json.dumps(message["properties"])
    # the body: [kwargs, embed] as a line of JSON, then the batch's JSON byte for byte
    body = base64.b64decode(message["body"])
    head, _, carried = body.partition(b"\n")
    assert carried == batch_body(batch).encode()
    assert json.loads(head)[0] == {}
    # what a worker's Celery does with it: decoded by content type, if its app accepts it
    accept = prepare_accept_content(celery_app(Settings(redis_url=url)).conf.accept_content)
    (payload,), kwargs, _ = loads(
        body, message["content-type"], message["content-encoding"], accept=accept
    )
    assert isinstance(payload, str) and kwargs == {}
    assert batch_of(payload) == batch
    # plain JSON, as sent where the workers did not say they read framed bodies: the batch's
    # JSON as a string, quoted; and as dispatchers sent it before, a string or an object
    assert isinstance(plain, bytes)
    message = json.loads(plain)
    assert message["content-type"] == "application/json"
    body = base64.b64decode(message["body"])
    (quoted,), _, _ = loads(body, "application/json", "utf-8", accept=accept)
    assert batch_of(quoted) == batch
    older = json.dumps([[batch_body(batch)], {}, {}]).encode()
    (quoted,), _, _ = loads(older, "application/json", "utf-8", accept=accept)
    assert batch_of(quoted) == batch
    assert batch_of(batch.model_dump(mode="json")) == batch
