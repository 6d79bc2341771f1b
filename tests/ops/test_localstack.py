from __future__ import annotations

import os
import subprocess
import sys
import time

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack, ServiceState, _terminate
from headrace.transport.kafka import clients as kafka_clients


def test_stack_reports_its_services_and_they_answer(stack: LocalStack) -> None:
    services = {s.name: s for s in stack.status()}
    assert set(services) == {"s3", "redis", "kafka"}
    assert all(s.alive() for s in services.values())
    settings = Settings()
    assert connections.redis_client(settings).ping()
    s3 = stack.s3_client()
    s3.put_object(Bucket="tansu", Key="probe/test", Body=b"hello")
    assert s3.get_object(Bucket="tansu", Key="probe/test")["Body"].read() == b"hello"
    kafka_clients.ensure_topics(settings, ["t-localstack-probe"])


def test_up_is_idempotent(stack: LocalStack) -> None:
    before = {s.name: s.pid for s in stack.status()}
    after = {s.name: s.pid for s in stack.up()}
    assert before == after


def test_a_stack_already_running_is_left_running_by_a_block_that_needed_it(
    stack: LocalStack,
) -> None:
    before = {s.name: s.pid for s in stack.status()}
    with LocalStack(Settings()).while_needed() as held:
        assert {s.name: s.pid for s in held.status()} == before
    assert stack.is_up() and {s.name: s.pid for s in stack.status()} == before


def test_a_process_that_outlives_sigterm_is_killed_and_gone_when_terminate_returns() -> None:
    """tansu under traffic outlives SIGTERM's grace: once ``_terminate`` returns, the
    process no longer runs (``alive`` says so), so ``up`` right after starts it again."""
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); signal.pause()",  # until a signal it does not ignore
        ],
        stdout=subprocess.PIPE,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
    service = ServiceState("kafka", stubborn.pid, "127.0.0.1:1", "log")
    assert service.alive()
    began = time.monotonic()
    _terminate(stubborn.pid, grace_s=0.3)
    assert not service.alive()
    assert time.monotonic() - began >= 0.3  # it waited the grace, then killed
    assert not os.path.exists(f"/proc/{stubborn.pid}")  # reaped, not left a zombie
