"""A workaround in kombu's Redis transport (5.7), applied by ``tasks.celery_app``.

When Celery loses its Redis broker with a task unacknowledged, it closes the connection, and
closing the channel restores the unacknowledged messages through a fresh client. That client
is built from the connection's info, which the close has already dropped: kombu's
``Channel._connparams`` then raises ``AttributeError: 'NoneType' object has no attribute
'hostname'`` (celery/kombu issues 582 and 970 show the same trace). Celery counts only
connection errors as recoverable there, so the worker stopped ("Unrecoverable error"): seen
in CI's fault test that restarts Redis mid-run. Here a channel whose connection is gone
says so as the connection error it is; Celery ignores it while closing and connects again.
The messages it could not restore stay in Redis's unacknowledged index, restored after the
visibility timeout; the dispatcher sends a batch again on its own lease anyway.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_PATCHED = "_headrace_connparams"


def apply() -> None:
    """Once per process; calling it again does nothing."""
    channel = kombu_redis.Channel
    if getattr(channel, _PATCHED, None) is not None:
        return
    original: Any = channel._connparams

    def connparams(self: Any, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection is closed")
        return original(self, asynchronous=asynchronous)

    setattr(channel, _PATCHED, original)
    setattr(channel, "_connparams", connparams)  # noqa: B010 (a method of kombu's class)
