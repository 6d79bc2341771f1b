"""Bulk files on local disk and on S3 (SeaweedFS), plain and zstd; spools cut a partial line
and refuse a line whole on a full disk."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import zstandard

from headrace import connections
from headrace.config.settings import Settings
from headrace.jobs.files import DiskFull, Spool, deliver, read_lines
from headrace.ops.localstack import LocalStack
from tests.disk import fill, small_disk

LINES = ["first", '{"json": "line"}', "ünïcode ✓", "", "last without newline"]


def test_local_plain_and_zst(tmp_path: Path) -> None:
    plain = tmp_path / "in.jsonl"
    plain.write_text("\n".join(LINES), encoding="utf-8")
    assert list(read_lines(str(plain), Settings())) == LINES
    packed = tmp_path / "in.jsonl.zst"
    # two frames, as an appending writer would leave them
    cctx = zstandard.ZstdCompressor()
    data = "\n".join(LINES).encode()
    packed.write_bytes(cctx.compress(data[:10]) + cctx.compress(data[10:]))
    assert list(read_lines(str(packed), Settings())) == LINES


def test_s3_round_trip(stack: LocalStack, tmp_path: Path) -> None:
    settings = Settings()
    bucket = f"t-jobs-{uuid.uuid4().hex[:8]}"
    connections.s3_client(settings).create_bucket(Bucket=bucket)
    spool = tmp_path / "out.jsonl"
    spool.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    for name in ("out.jsonl", "out.jsonl.zst"):
        url = f"s3://{bucket}/results/{name}"
        deliver(spool, url, settings)
        assert list(read_lines(url, settings)) == LINES
    local = tmp_path / "copy" / "out.jsonl.zst"
    deliver(spool, str(local), settings)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(local.read_bytes()).decode() == (
        spool.read_text(encoding="utf-8")
    )


def test_spool_cuts_a_partial_last_line(tmp_path: Path) -> None:
    path = tmp_path / "spool.jsonl"
    spool = Spool(path)
    spool.append('{"a": 1}')
    spool.append('{"b": 2}')
    spool.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"c": 3, "trunc')  # a run killed mid-write
    again = Spool(path)
    assert list(again.lines()) == ['{"a": 1}', '{"b": 2}']
    again.append('{"c": 3}')
    again.close()
    assert path.read_text(encoding="utf-8").splitlines() == ['{"a": 1}', '{"b": 2}', '{"c": 3}']
    only_partial = tmp_path / "partial.jsonl"
    only_partial.write_text('{"never finished', encoding="utf-8")
    Spool(only_partial).close()
    assert only_partial.read_text() == ""


def test_a_full_disk_refuses_a_line_whole_and_keeps_every_line_written(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 64 * 1024) as disk:
        filler = fill(disk, leave_bytes=8 * 1024)
        spool = Spool(disk / "jobs" / "output.jsonl")
        written = []
        with pytest.raises(DiskFull, match="no space left on the disk of"):
            for n in range(10_000):
                line = json.dumps({"line": n, "pad": "x" * 300})
                spool.append(line)
                written.append(line)
        assert 0 < len(written) < 10_000
        with pytest.raises(DiskFull):  # and it takes no more after that
            spool.append('{"late": 1}')
        spool.close()
        assert spool.path.read_text(encoding="utf-8").splitlines() == written  # none partial
        filler.unlink()  # room again: a new spool carries on where this one stopped
        again = Spool(spool.path)
        again.append('{"after": 1}')
        again.close()
        assert list(Spool(spool.path).lines()) == [*written, '{"after": 1}']
