"""Real model folders for registry tests: a copy of the MiniLM wheel's files, and one
uploaded to the local S3."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from pathlib import Path

from headrace import connections
from headrace.config.settings import Settings
from headrace.models.registry import model_spec
from headrace.models.sources import S3Source

MINILM = "all-MiniLM-L6-v2"


def minilm_copy(dest: Path) -> Path:
    """A copy of all-MiniLM-L6-v2's folder (about 90 MB) at ``dest``."""
    shutil.copytree(model_spec(MINILM).path, dest)
    return dest


def upload(settings: Settings, folder: Path, bucket: str = "headrace-models-test") -> S3Source:
    """``folder``'s files under a fresh prefix of ``bucket`` on the local S3."""
    s3 = connections.s3_client(settings, read_timeout_s=60)
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=bucket)
    prefix = f"models/{uuid.uuid4().hex[:8]}/"
    for path in folder.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), bucket, prefix + path.relative_to(folder).as_posix())
    return S3Source(bucket, prefix)
