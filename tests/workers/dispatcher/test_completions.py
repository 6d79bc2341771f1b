"""Completion notices into the core's state, driven directly (the rig's core's parts)."""

from __future__ import annotations

from headrace.schemas.messages import Completion
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.completions import take_completions
from tests.workers.dispatcher.rig import Rig, of


def sent(rig: Rig, *names: str) -> ev.SendBatch:
    rig.workers()
    rig.read(*(rig.request(name) for name in names))
    [send] = of(ev.SendBatch, rig.tick(1))
    return send


def complete(rig: Rig, completion: Completion) -> None:
    core = rig.core
    take_completions(
        [completion], core.flights, core.health, core.workload, core.deferrals, core.quotas
    )


def test_a_batch_answered_in_parts_leaves_the_flights_with_its_last_part() -> None:
    rig = Rig()
    send = sent(rig, "a", "b")
    first, second = (item.ref for item in send.batch.items)
    complete(rig, Completion(batch_id=send.batch.batch_id, done=[first], computed=1))
    flight = rig.core.flights.get(send.batch.batch_id)
    assert flight is not None and len(flight.pending) == 1
    assert rig.core.flights.waiting_count() == 1
    complete(rig, Completion(batch_id=send.batch.batch_id, done=[second], computed=1))
    assert rig.core.flights.get(send.batch.batch_id) is None
    assert rig.core.flights.waiting_count() == 0


def test_a_late_completion_finishes_its_records_though_its_batch_is_gone() -> None:
    rig = Rig()
    send = sent(rig, "a")
    rig.core.flights.take(send.batch.batch_id)  # sent again meanwhile, under another id
    complete(rig, Completion(batch_id=send.batch.batch_id, done=[send.batch.items[0].ref]))
    assert rig.core.flights.waiting_count() == 0


def test_a_request_another_attempt_holds_waits_to_be_batched_again() -> None:
    rig = Rig()
    send = sent(rig, "a", "held")
    done, held = (item.ref for item in send.batch.items)
    batch_id = send.batch.batch_id
    complete(rig, Completion(batch_id=batch_id, done=[done], deferred=[held]))
    assert rig.core.flights.get(batch_id) is None  # nothing of it left unanswered
    assert rig.core.flights.waiting_count() == 1  # "held" waits for its turn again
    rig.clock.now += 60
    assert [pending.item.ref for _, pending in rig.core.deferrals.due()] == [held]
