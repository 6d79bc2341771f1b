from __future__ import annotations

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
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
