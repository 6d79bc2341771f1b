"""What a transport's broker promises decides each compensation: the broker flavor maps to
its guarantees, and a worker reads replies back only where acknowledged records may be
lost (the client's resends: tests/producers/test_client.py)."""

from __future__ import annotations

from headrace.config.settings import Settings
from headrace.schemas.messages import EmbeddingResult, Reply
from headrace.transport import BROKER_GUARANTEES, Guarantees, guarantees_of
from headrace.transport.memory import MemoryTransport
from headrace.workers.ledger import ReplyAt
from headrace.workers.reply_sink import TopicReplySink

LOSES = Guarantees(loses_acked_records=True)


def test_each_broker_flavor_says_what_it_promises() -> None:
    tansu = guarantees_of(Settings(broker_flavor="tansu"))
    kafka = guarantees_of(Settings(broker_flavor="kafka"))
    assert tansu.loses_acked_records and tansu.contiguous_offsets
    assert not kafka.loses_acked_records and not kafka.contiguous_offsets
    assert set(BROKER_GUARANTEES) == {"tansu", "kafka"}
    assert MemoryTransport().guarantees == Guarantees(False, True)


def reply(request_id: str) -> Reply:
    result = EmbeddingResult(embedding=[1.0], token_count=1)
    return Reply(request_id=request_id, tenant="t", model="m", result=result)


def test_replies_are_read_back_only_where_the_broker_may_lose_them() -> None:
    for guarantees, expected in ((LOSES, [False, True]), (Guarantees(), [False, False])):
        transport = MemoryTransport(guarantees=guarantees)
        transport.ensure_topics(["r"], partitions=1)
        sink = TopicReplySink(transport, Settings())
        sink.send("r", reply("kept"))
        [landed] = sink.flush()
        at = ReplyAt(landed.topic, landed.partition, landed.offset)
        gone = ReplyAt(landed.topic, landed.partition, landed.offset + 5)  # never written
        assert sink.missing([(at, "kept"), (gone, "lost")]) == expected, guarantees
