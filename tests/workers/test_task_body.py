"""A batch task's framed body (no IO): what goes in comes out, the batch byte for byte; a
body that is not one is refused with a clear error; only JSON is ever parsed."""

from __future__ import annotations

import json

import pytest
from kombu.exceptions import ContentDisallowed, DecodeError
from kombu.serialization import dumps, loads

from headrace.workers import task_body

EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
BATCH = json.dumps({"batch_id": "b", "items": [{"input": 'a "quoted" \u00fcber text\\n'}]})


def test_the_batch_goes_in_as_it_is_and_comes_out_the_same() -> None:
    content_type, encoding, body = dumps(([BATCH], {}, EMBED), serializer=task_body.SERIALIZER)
    assert (content_type, encoding) == (task_body.CONTENT_TYPE, "utf-8")
    raw = body if isinstance(body, bytes) else body.encode()
    assert raw.endswith(BATCH.encode())  # not quoted: no escape added
    assert loads(raw, content_type, encoding, accept={content_type}) == ([BATCH], {}, EMBED)
    assert task_body.decode(raw.decode()) == ([BATCH], {}, EMBED)


def test_only_a_task_with_one_json_string_is_framed() -> None:
    with pytest.raises(ValueError, match="one argument"):
        task_body.encode(([BATCH, BATCH], {}, EMBED))
    with pytest.raises(ValueError, match="one argument"):
        task_body.encode(([{"batch_id": "b"}], {}, EMBED))


@pytest.mark.parametrize(
    "body",
    [b"no newline at all", b"[1, 2]\n{}", b"not json\n{}", b'{"kwargs": {}}\n{}'],
)
def test_a_body_that_is_no_framed_batch_is_refused(body: bytes) -> None:
    with pytest.raises((ValueError, DecodeError)):
        loads(body, task_body.CONTENT_TYPE, "utf-8", accept={task_body.CONTENT_TYPE})


def test_a_consumer_that_does_not_accept_it_refuses_it() -> None:
    _, _, body = dumps(([BATCH], {}, EMBED), serializer=task_body.SERIALIZER)
    with pytest.raises(ContentDisallowed):
        loads(body, task_body.CONTENT_TYPE, "utf-8", accept={"application/json"})
