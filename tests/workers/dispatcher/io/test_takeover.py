"""A backlog taken over: what the ledger has as answered is done at once (the in-memory
ledger behind the project's own ledger interface)."""

from __future__ import annotations

from headrace.schemas.messages import Request
from headrace.transport import Record
from headrace.workers.dispatcher.io.takeover import answered_before
from headrace.workers.ledger.memory import MemoryLedger


def record(request_id: str, offset: int, timestamp_ms: int) -> Record:
    request = Request(
        request_id=request_id, tenant="acme", model="m", input="x", reply_to="p.replies.a"
    )
    value = request.model_dump_json().encode()
    return Record("p.requests.b16", 0, offset, None, value, (), timestamp_ms)


def test_only_records_from_before_the_partition_was_held_are_looked_up() -> None:
    ledger = MemoryLedger()
    ledger.mark_answered([("acme", "old-done"), ("acme", "new-done")])
    partition = ("p.requests.b16", 0)
    polled = {
        partition: [
            record("old-done", 0, 1_000),
            record("old-open", 1, 1_500),
            record("new-done", 2, 2_500),  # produced after: the normal path, not looked up
        ]
    }
    assert answered_before(polled, {partition: 2_000}, ledger) == {("acme", "old-done")}
    # a partition with no time of its own (not held by a rebalance): nothing looked up
    assert answered_before(polled, {}, ledger) == frozenset()


def test_a_record_that_names_no_request_is_passed_over() -> None:
    partition = ("p.requests.b16", 0)
    junk = Record(partition[0], 0, 0, None, b"not json", (), 1_000)
    assert answered_before({partition: [junk]}, {partition: 2_000}, MemoryLedger()) == set()
