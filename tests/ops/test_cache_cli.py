"""`headrace cache invalidate` and `headrace cache stats` against the real stack, the
invalidation applied by a running invalidator."""

from __future__ import annotations

import threading
import uuid

import pytest
from typer.testing import CliRunner

from headrace.cache.store import open_cache
from headrace.config.settings import Settings
from headrace.consumers.invalidation import Invalidator
from headrace.ops.cli import app
from headrace.ops.localstack import LocalStack
from tests.cache.entries import TAGS, new_entry
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(120)


def test_invalidate_by_tag_from_the_command_line(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"t-cli-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", prefix)
    settings = Settings()
    cache = open_cache(settings, l1=False)
    entry = new_entry(cache, "acme", "cli text", ["doc:5"], policy=TAGS)
    assert cache.put(entry)
    runner = CliRunner()
    stats = runner.invoke(app, ["cache", "stats"])
    assert stats.exit_code == 0, stats.output
    assert "L2 entries (Redis)" in stats.output and "L3 objects (S3)" in stats.output

    bad = runner.invoke(app, ["cache", "invalidate", "--tag", "doc:5"])  # whose tag?
    assert bad.exit_code == 2 and "need a tenant" in bad.output

    invalidator = Invalidator(settings)
    stop = threading.Event()
    thread = threading.Thread(target=invalidator.run, args=(stop,), daemon=True)
    thread.start()
    try:
        sent = runner.invoke(app, ["cache", "invalidate", "--tenant", "acme", "--tag", "doc:5"])
        assert sent.exit_code == 0, sent.output
        eventually(lambda: cache.get(entry.key) is None, 10, "the entry evicted")
        # the invalidator counts after it evicts: wait for its count, then check it is one
        eventually(lambda: invalidator.counts["applied"] > 0, 10, "the invalidation counted")
        assert invalidator.counts["applied"] == 1
    finally:
        stop.set()
        thread.join(timeout=10)
    after = runner.invoke(app, ["cache", "stats"])
    assert "invalidations_applied" in after.output
