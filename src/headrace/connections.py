"""Clients for Redis and S3, configured from Settings in one place, and the errors that
mean "that store is unreachable right now"."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import boto3
import redis
from botocore.config import Config as BotoConfig
from kombu.exceptions import OperationalError

from headrace.config.settings import Settings

# Redis (and the Celery broker on it) unreachable: callers retry on their next pass.
REDIS_ERRORS = (redis.RedisError, OperationalError, OSError)

# SeaweedFS started without an IAM config accepts any key pair; these are labels, not secrets
# (production sets s3_access_key_id and s3_secret_access_key).
LOCAL_S3_KEY_ID = "headrace-local"
LOCAL_S3_SECRET = "headrace-local"


def s3_client(settings: Settings, read_timeout_s: float = 5) -> Any:
    secret = settings.s3_secret_access_key
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        aws_access_key_id=settings.s3_access_key_id or LOCAL_S3_KEY_ID,
        aws_secret_access_key=secret.get_secret_value() if secret else LOCAL_S3_SECRET,
        region_name=settings.s3_region,
        config=BotoConfig(
            connect_timeout=1, read_timeout=read_timeout_s, retries={"max_attempts": 1}
        ),
    )


def redis_client(settings: Settings, timeout_s: float = 5) -> redis.Redis:
    return redis.Redis.from_url(
        settings.redis_url,
        password=settings.redis_password_value(),
        socket_timeout=timeout_s,
        socket_connect_timeout=min(2, timeout_s),
        health_check_interval=10,
    )


def broker_url(settings: Settings) -> str:
    """The Redis URL with the password from settings put in (Celery reads it from the URL)."""
    password = settings.redis_password_value()
    if password is None:
        return settings.redis_url
    parts = urlsplit(settings.redis_url)
    netloc = f":{quote(password, safe='')}@{parts.hostname}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
