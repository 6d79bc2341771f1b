"""kombu's Redis channel after Celery dropped its connection (``broker_fixes``): asked for
a client, it says the connection is gone as a connection error, which Celery ignores while
closing, instead of an AttributeError that stopped the worker."""

from __future__ import annotations

import pytest
import redis
from kombu import Connection
from kombu.common import ignore_errors

from headrace.config.settings import Settings
from headrace.connections import broker_url
from headrace.ops.localstack import LocalStack
from headrace.workers import broker_fixes


def test_a_channel_whose_connection_is_gone_raises_a_connection_error(stack: LocalStack) -> None:
    broker_fixes.apply()
    broker_fixes.apply()  # a second time does nothing
    with Connection(broker_url(Settings())) as conn:
        channel = conn.default_channel
        channel.client.ping()  # a live channel works as before
        channel.connection.client = None  # what closing the connection leaves
        channel._pool = None

        with pytest.raises(redis.exceptions.ConnectionError):
            channel._connparams()
        with ignore_errors(conn):  # what Celery's close does: nothing escapes
            channel._connparams()
