"""Clients for Redis and S3, configured from Settings in one place, the errors that mean
"that store is unreachable right now", and zstd-compressed objects in S3 (``ZstdObjects``:
the cache's L3 and archived sessions)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import boto3
import redis
import zstandard
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError
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


class S3Unavailable(RuntimeError):
    """S3 could not be reached, or refused a request."""


_MISSING = ("NoSuchKey", "404", "NoSuchBucket")
_DELETE_BATCH = 1000  # S3's limit per DeleteObjects call


class ZstdObjects:
    """Objects of one S3 bucket, each zstd-compressed: bytes in, bytes out. "No such object"
    reads as None; every other S3 failure is S3Unavailable. The bucket is created on the
    first write that finds it missing."""

    def __init__(self, client: Any, bucket: str, level: int = 3) -> None:
        self.s3 = client
        self.bucket = bucket
        self.level = level
        # zstandard's (de)compressors are not thread-safe (two threads compressing with one
        # crashed both workers in the C backend): one of each per thread
        self._local = threading.local()
        self._bucket_ready = False

    @property
    def _compress(self) -> zstandard.ZstdCompressor:
        if not hasattr(self._local, "compress"):
            self._local.compress = zstandard.ZstdCompressor(level=self.level)
        compressor: zstandard.ZstdCompressor = self._local.compress
        return compressor

    @property
    def _decompress(self) -> zstandard.ZstdDecompressor:
        if not hasattr(self._local, "decompress"):
            self._local.decompress = zstandard.ZstdDecompressor()
        decompressor: zstandard.ZstdDecompressor = self._local.decompress
        return decompressor

    def get(self, key: str) -> bytes | None:
        try:
            raw = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return None
            raise S3Unavailable(str(exc)) from exc
        except BotoCoreError as exc:
            raise S3Unavailable(str(exc)) from exc
        return bytes(self._decompress.decompress(raw))

    def put(self, key: str, raw: bytes) -> int:
        """Store ``raw`` under ``key``; returns its compressed size."""
        body = self._compress.compress(raw)
        try:
            self._ensure_bucket()
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        except (ClientError, BotoCoreError) as exc:
            raise S3Unavailable(str(exc)) from exc
        return len(body)

    def delete(self, keys: Iterable[str]) -> None:
        names = [{"Key": k} for k in keys]
        try:
            for i in range(0, len(names), _DELETE_BATCH):
                batch = names[i : i + _DELETE_BATCH]
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch})
        except ClientError as exc:
            if _code(exc) != "NoSuchBucket":
                raise S3Unavailable(str(exc)) from exc
        except BotoCoreError as exc:
            raise S3Unavailable(str(exc)) from exc

    def usage(self, prefix: str) -> tuple[int, int]:
        """(objects, compressed bytes) under ``prefix``."""
        count = size = 0
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    count += 1
                    size += obj["Size"]
        except ClientError as exc:
            if _code(exc) != "NoSuchBucket":
                raise S3Unavailable(str(exc)) from exc
        except BotoCoreError as exc:
            raise S3Unavailable(str(exc)) from exc
        return count, size

    def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        try:
            self.s3.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self.s3.create_bucket(Bucket=self.bucket)
            except ClientError as exc:  # another thread or process created it first
                if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        self._bucket_ready = True


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
