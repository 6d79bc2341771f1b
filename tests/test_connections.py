"""Connections to the services, on the real ones: S3 objects written and read by many threads
through one ``ZstdObjects`` (the cache's L3 writes on four threads: zstandard's compressors
are not thread-safe, and one shared by them crashed both workers of a benchmark)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from headrace.ops.localstack import LocalStack

THREADS_SCRIPT = textwrap.dedent(
    """
    import os, uuid
    from concurrent.futures import ThreadPoolExecutor
    from headrace.config.settings import Settings
    from headrace.connections import ZstdObjects, s3_client

    run = uuid.uuid4().hex[:8]
    # a new bucket: every thread's first write finds it missing and creates it
    objects = ZstdObjects(s3_client(Settings()), f"headrace-test-threads-{run}")
    block = os.urandom(4096)

    def round_trip(i):
        body = (block * 1024)[i:]  # 4 MB: compressing takes long enough to overlap
        objects.put(f"{run}/{i}", body)
        assert objects.get(f"{run}/{i}") == body
        return len(body)

    with ThreadPoolExecutor(8) as pool:
        sizes = list(pool.map(round_trip, range(160)))
    objects.delete(f"{run}/{i}" for i in range(160))
    print("ROUND TRIPS", len(sizes))
    """
)


def test_many_threads_share_one_zstd_objects_store(stack: LocalStack) -> None:
    done = subprocess.run(
        [sys.executable, "-c", THREADS_SCRIPT], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "ROUND TRIPS 160" in done.stdout
