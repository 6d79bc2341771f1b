"""Where bulk files live: local paths or ``s3://bucket/key`` URLs (SeaweedFS locally), plain
or zstd-compressed (``.zst``). Inputs are read as a stream of lines, so memory stays flat
however long the file. Results are appended to spool files in the job's folder (flushed and
fsynced at each checkpoint: a killed run loses nothing it checkpointed) and delivered to
their destination when the job finalizes."""

from __future__ import annotations

import errno
import io
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import zstandard

from headrace import connections
from headrace.config.settings import Settings


def is_s3(location: str) -> bool:
    return location.startswith("s3://")


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.netloc, parts.path.lstrip("/")


class _BodyReader(io.RawIOBase):
    """An S3 response body as a raw binary stream (for TextIOWrapper and zstd)."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


def _open_binary(location: str, settings: Settings) -> IO[bytes]:
    if is_s3(location):
        bucket, key = _split(location)
        body = connections.s3_client(settings, read_timeout_s=60).get_object(
            Bucket=bucket, Key=key
        )["Body"]
        return io.BufferedReader(_BodyReader(body), buffer_size=1 << 20)
    return open(location, "rb")


def read_lines(location: str, settings: Settings) -> Iterator[str]:
    """Each line of the file without its newline (a last line without one included)."""
    raw = _open_binary(location, settings)
    stream: IO[bytes] = raw
    if location.endswith(".zst"):
        stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    with io.TextIOWrapper(stream, encoding="utf-8", newline="\n") as text:
        for line in text:
            yield line.rstrip("\n").rstrip("\r")


class DiskFull(RuntimeError):
    """No space left where a job writes its spools or index (``ENOSPC``/``EDQUOT``): the
    runner stops at once and the job carries on from its last checkpoint once there is room
    (``job_disk_full_retry_s``)."""


def disk_full(exc: BaseException) -> bool:
    return isinstance(exc, DiskFull) or (
        isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    )


class Spool:
    """An append-only JSONL file. A run killed mid-write leaves a partial last line; opening
    the spool again cuts it off, so every line in it is whole.

    Each line is one unbuffered write: nothing is left in a buffer past the guard's say, and
    a write the disk refuses (full) is cut off again, leaves nothing behind to be flushed
    later, and raises ``DiskFull``; the spool takes no more lines after that."""

    def __init__(self, path: Path, guard: Callable[[], None] | None = None) -> None:
        """``guard``: called before each append; it raises when this writer may not write
        (a runner whose lease on the job is not safely its own)."""
        self.path = path
        self.guard = guard
        path.parent.mkdir(parents=True, exist_ok=True)
        _cut_partial_line(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size  # the lease makes this the only writer
        self._full: DiskFull | None = None

    def append(self, line: str) -> None:
        if self.guard is not None:
            self.guard()
        if self._full is not None:
            raise self._full
        encoded = (line + "\n").encode("utf-8")
        data, start = memoryview(encoded), self._size
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as exc:
            if not disk_full(exc):
                raise
            os.ftruncate(self._fd, start)  # no partial line; truncating frees, so it works
            self._full = DiskFull(f"no space left on the disk of {self.path}")
            raise self._full from exc
        self._size = start + len(encoded)

    def checkpoint(self) -> None:
        """Everything appended so far is on disk when this returns."""
        try:
            os.fsync(self._fd)
        except OSError as exc:
            if disk_full(exc):
                raise DiskFull(f"no space left on the disk of {self.path}") from exc
            raise

    def lines(self) -> Iterator[str]:
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                yield line.rstrip("\n")

    def close(self) -> None:
        """Checkpointed and closed; a spool the disk refused is closed only."""
        if self._fd < 0:
            return
        try:
            if self._full is None:
                self.checkpoint()
        finally:
            os.close(self._fd)
            self._fd = -1


def _cut_partial_line(path: Path) -> None:
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        size = f.seek(0, os.SEEK_END)
        step = min(size, 1 << 16)
        while True:  # find the last newline from the end
            f.seek(size - step)
            chunk = f.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                f.truncate(size - step + cut + 1)
                return
            if step == size:
                f.truncate(0)
                return
            step = min(size, step * 2)


def deliver(spool: Path, location: str, settings: Settings) -> None:
    """Copy a finished spool to ``location`` (zstd-compressed if it ends in ``.zst``)."""
    if not is_s3(location) and Path(location).resolve() == spool.resolve():
        return
    if is_s3(location):
        bucket, key = _split(location)
        s3 = connections.s3_client(settings, read_timeout_s=60)
        with open(spool, "rb") as src:
            body: IO[bytes] = src
            if location.endswith(".zst"):
                body = zstandard.ZstdCompressor().stream_reader(src)
            s3.upload_fileobj(body, bucket, key)
        return
    target = Path(location)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(spool, "rb") as src, open(target, "wb") as dst:
        if location.endswith(".zst"):
            zstandard.ZstdCompressor().copy_stream(src, dst)
        else:
            shutil.copyfileobj(src, dst)
