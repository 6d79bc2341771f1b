"""Stream reassembly: in seq order, each piece once, completed by the final reply."""

from __future__ import annotations

from headrace.consumers.streams import DeltaAssembler
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import GenerationResult, Reply, StreamDelta, Usage


def delta(seq: int, text: str) -> StreamDelta:
    return StreamDelta(request_id="r", tenant="t", model="m", seq=seq, text=text)


def final(text: str) -> Reply:
    result = GenerationResult(
        text=text, finish_reason="length", usage=Usage(prompt_tokens=1, completion_tokens=3)
    )
    return Reply(request_id="r", tenant="t", model="m", result=result)


def test_pieces_come_out_in_order_once_even_when_a_batch_is_redelivered() -> None:
    a = DeltaAssembler()
    assert a.add(delta(0, "The")) == ["The"]
    assert a.add(delta(2, " wheel")) == []  # a gap: held until seq 1 comes
    assert a.add(delta(1, " mill")) == [" mill", " wheel"]
    # the redelivered batch streams the same pieces again from 0
    assert a.add(delta(0, "The")) == [] and a.add(delta(1, " mill")) == []
    assert a.add(delta(3, " turns")) == [" turns"]
    assert a.duplicates == 2
    assert a.finish(final("The mill wheel turns")) == ""
    assert a.text == "The mill wheel turns"


def test_the_final_reply_completes_a_stream_that_lost_pieces() -> None:
    a = DeltaAssembler()
    a.add(delta(0, "The"))
    assert a.finish(final("The mill")) == " mill"
    b = DeltaAssembler()
    failure = Reply.failure("r", "t", "m", ErrorCode.model_error, "boom")
    assert b.finish(failure) == ""
