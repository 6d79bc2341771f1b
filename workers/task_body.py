"""A batch task's message body with the batch as it is, not quoted.

A task's body is ``[args, kwargs, embed]``. With kombu's JSON serializer the task's one
argument, the batch already as JSON (``tasks.task_args``), is written again as a JSON
string: every quote escaped, every non-ASCII character as ``\\uXXXX``, and a worker unescapes
it all before parsing the batch (for a 46-row batch, 55 us to write and 59 us to read back,
measured, against 3.6 and 4.6 us framed). So the body is framed instead: ``kwargs`` and
``embed`` as one line of JSON, a newline, then the batch's JSON as it is (JSON has no raw
newline, so the first one ends the line). It is still JSON only: nothing here unpickles.

The content type is registered with kombu when this module is imported (``tasks`` does).
Workers accept it beside plain JSON, and say so with their beats (``WORKER_READS``); a
dispatcher frames a batch only while every live worker has said it (``WorkersWatch.framed``),
so a worker of an older release, which refuses the content type, is only ever sent plain
JSON, and workers and dispatchers may be upgraded in either order.
"""

from __future__ import annotations

import json
from typing import Any

from kombu.serialization import register

SERIALIZER = "headrace-batch"
CONTENT_TYPE = "application/x-headrace-batch"
WORKER_READS = "bodies"  # the key of a worker's beat info listing the bodies it reads


def encode(body: Any) -> str:
    """``(args, kwargs, embed)`` with one argument, a string of JSON, as the framed body."""
    args, kwargs, embed = body
    if len(args) != 1 or not isinstance(args[0], str):
        raise ValueError("a headrace-batch body carries one argument: the batch's JSON")
    return json.dumps([kwargs, embed], separators=(",", ":")) + "\n" + args[0]


def decode(data: bytes | str) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The framed body as ``(args, kwargs, embed)``; the batch stays a string, parsed once
    by the task (``tasks.batch_of``)."""
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray | memoryview) else data
    head, newline, batch = text.partition("\n")
    if not newline:
        raise ValueError("a headrace-batch body without its batch")
    kwargs, embed = json.loads(head)
    if not isinstance(kwargs, dict) or not isinstance(embed, dict):
        raise ValueError("a headrace-batch body's first line is not [kwargs, embed]")
    return [batch], kwargs, embed


register(  # type: ignore[no-untyped-call]
    SERIALIZER, encode, decode, content_type=CONTENT_TYPE, content_encoding="utf-8"
)
