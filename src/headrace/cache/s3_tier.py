"""L3: one S3 object per entry, zstd-compressed JSON, under ``<topic prefix>/`` in the cache
bucket. An unreachable S3 raises S3Unavailable; the tiered cache skips L3 and counts it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import zstandard
from botocore.exceptions import BotoCoreError, ClientError

from headrace.cache.entry import CacheEntry

DELETE_BATCH = 1000  # S3's limit per DeleteObjects call


class S3Unavailable(RuntimeError):
    pass


class S3Tier:
    def __init__(self, client: Any, bucket: str, prefix: str, level: int = 3) -> None:
        self.s3 = client
        self.bucket = bucket
        self.prefix = prefix
        self._compress = zstandard.ZstdCompressor(level=level)
        self._decompress = zstandard.ZstdDecompressor()
        self._bucket_ready = False

    def object_key(self, key: str) -> str:
        return f"{self.prefix}/{key[:2]}/{key}.json.zst"

    def get(self, key: str) -> CacheEntry | None:
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=self.object_key(key))
            raw = obj["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
                return None
            raise S3Unavailable(str(exc)) from exc
        except BotoCoreError as exc:
            raise S3Unavailable(str(exc)) from exc
        return CacheEntry.from_bytes(self._decompress.decompress(raw))

    def put(self, entry: CacheEntry) -> int:
        """Store ``entry``; returns its compressed size."""
        body = self._compress.compress(entry.to_bytes())
        try:
            self._ensure_bucket()
            self.s3.put_object(Bucket=self.bucket, Key=self.object_key(entry.key), Body=body)
        except (ClientError, BotoCoreError) as exc:
            raise S3Unavailable(str(exc)) from exc
        return len(body)

    def delete(self, keys: Iterable[str]) -> None:
        names = [{"Key": self.object_key(k)} for k in keys]
        try:
            for i in range(0, len(names), DELETE_BATCH):
                self.s3.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": names[i : i + DELETE_BATCH]}
                )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                return
            raise S3Unavailable(str(exc)) from exc
        except BotoCoreError as exc:
            raise S3Unavailable(str(exc)) from exc

    def usage(self) -> tuple[int, int]:
        """(objects, bytes) under this prefix."""
        count = size = 0
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}/"
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    count += 1
                    size += obj["Size"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                return 0, 0
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
            self.s3.create_bucket(Bucket=self.bucket)
        self._bucket_ready = True
