"""`headrace buckets propose` against lengths recorded in the local stack's Redis."""

from __future__ import annotations

import random
import re
import uuid

import pytest
from typer.testing import CliRunner

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.cli import app
from headrace.ops.localstack import LocalStack
from headrace.schemas.buckets import bucket_for
from headrace.workers.lengths import LengthHistogram

pytestmark = pytest.mark.timeout(60)


def test_bounds_are_proposed_from_the_lengths_the_dispatchers_saw(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"t-buckets-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", prefix)
    runner = CliRunner()
    empty = runner.invoke(app, ["buckets", "propose"])
    assert empty.exit_code == 1 and "no lengths recorded" in empty.output
    settings = Settings()
    lengths = LengthHistogram(connections.redis_client(settings), prefix)
    rng = random.Random(5)
    for _ in range(3000):
        n = rng.randint(5, 31) if rng.random() < 0.8 else rng.randint(32, 200)
        lengths.add(bucket_for(n, settings.buckets), [n])
    lengths.save()
    out = runner.invoke(app, ["buckets", "propose", "--count", "18"])
    assert out.exit_code == 0, out.output
    assert "3,000 requests" in out.output
    now, proposed = (float(x) for x in re.findall(r"(0\.\d{3})\s*│?\s*$", out.output, re.M)[:2])
    assert proposed > now
    assert "HEADRACE_BUCKETS='[" in out.output and ", 512]'" in out.output
