"""Trust no producer: the core counts every request's tokens itself (the rig's tokenizer
counts words) and routes by that count: a request longer than its topic's bucket, or on the
unbucketed topic, goes on to its proper bucket; one past the largest bucket is answered;
the batch budget is the real count, never the producer's claim."""

from __future__ import annotations

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Request
from headrace.schemas.params import EmbedParams, GenerateParams
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.intake import Rejection
from headrace.workers.dispatcher.routing import Here, Onward, count_requests, route
from tests.workers.dispatcher.rig import TOPICS, Rig, ids, of
from tests.workers.dispatcher.test_core import P16, committed

BUCKETS = (16, 32)


def request(**params: object) -> Request:
    generation = params.pop("generation", None)
    return Request(
        request_id="r",
        tenant="t",
        model="m",
        input="x",
        reply_to="t.replies",
        task="generate" if generation else "embed",
        params=generation or EmbedParams(**params),  # type: ignore[arg-type]
    )


def test_the_route_is_the_count_not_the_topic() -> None:
    assert route(request(), 10, 16, BUCKETS, 512) == Here(10)
    assert route(request(), 10, 32, BUCKETS, 512) == Here(10)  # shorter stays: no harm
    assert route(request(), 20, 16, BUCKETS, 512) == Onward(32)
    assert route(request(), 10, None, BUCKETS, 512) == Onward(16)  # the unbucketed topic
    too_long = route(request(), 40, 32, BUCKETS, 512)
    assert not isinstance(too_long, Here | Onward) and too_long.code is ErrorCode.input_too_long
    assert route(request(truncate=True), 40, 16, BUCKETS, 512) == Onward(32)
    assert route(request(truncate=True), 40, 32, BUCKETS, 512) == Here(32)
    assert route(request(), 20, 32, BUCKETS, 18) != Here(20)  # past the model's own limit


def test_a_generate_request_costs_its_prompt_and_its_new_tokens() -> None:
    generate = request(generation=GenerateParams(max_tokens=12))
    assert route(generate, 10, 16, BUCKETS, 512) == Here(22)


def test_a_request_longer_than_its_bucket_is_forwarded_as_it_was() -> None:
    rig = Rig()
    rig.workers()
    record = rig.request("long", bucket=16, tokens=30, hint=5)  # it claims 5 tokens
    [forward] = of(ev.Forward, rig.read(record))
    assert (forward.topic, forward.key, forward.value) == (
        TOPICS.requests(32),
        record.key,
        record.value,
    )
    assert not of(ev.SendBatch, rig.tick(1))
    assert committed(rig.tick(0.2)) <= 0  # not before the broker has the copy
    rig.handle(ev.AnswersDelivered([forward.ref]))
    assert committed(rig.tick(0.2)) == 1
    assert rig.core.stats.forwarded == 1


def test_an_input_given_as_token_ids_counts_them_and_the_special_tokens() -> None:
    rig = Rig()
    rig.workers()
    given = rig.request("ids", bucket=16, hint=5, input="", input_ids=list(range(100, 120)))
    [forward] = of(ev.Forward, rig.read(given))  # 20 ids and the two special tokens: 22
    assert forward.topic == TOPICS.requests(32)
    fits = rig.request("few", bucket=16, hint=5, input="", input_ids=[7] * 14)  # 16: it fits
    assert not of(ev.Forward, rig.read(fits))
    [send] = of(ev.SendBatch, rig.tick(1))
    assert ids(send) == ["few"]


def test_a_pair_counts_as_its_two_texts() -> None:
    rig = Rig()
    rig.workers()
    pair = " ".join(["word"] * 10)  # 12 tokens as the rig counts, beside the input's 7
    ranked = rig.request("pair", bucket=16, tokens=7, task="rerank", input_pair=pair)
    [forward] = of(ev.Forward, rig.read(ranked))
    assert forward.topic == TOPICS.requests(32)  # 19 tokens: past 16


def test_a_request_on_the_unbucketed_topic_goes_to_its_bucket() -> None:
    rig = Rig()
    [forward] = of(ev.Forward, rig.read(rig.request("plain", bucket=None, tokens=10, hint=None)))
    assert forward.topic == TOPICS.requests(16)
    rig.handle(ev.AnswersDelivered([forward.ref]))
    assert committed(rig.tick(0.2), (TOPICS.ingress, 0)) == 1


def test_a_request_past_the_largest_bucket_is_answered_too_long() -> None:
    rig = Rig()
    [answer] = of(ev.Answer, rig.read(rig.request("huge", bucket=32, tokens=40, hint=3)))
    assert answer.error.code is ErrorCode.input_too_long and "40 tokens" in answer.error.message
    assert not of(ev.Forward, rig.actions)


def test_the_batch_budget_is_the_real_count_whatever_the_claim() -> None:
    rig = Rig(max_batch_tokens=64)
    rig.workers()
    # each claims 1 token; each really has 30: two rows already cost 64 > 60
    rig.read(*[rig.request(f"r{i}", bucket=32, tokens=30, hint=1) for i in range(3)])
    sends = of(ev.SendBatch, rig.tick())
    assert [ids(s) for s in sends] == [["r0", "r1"]]
    assert (sends[0].real_tokens, sends[0].padded_tokens) == (60, 60)
    assert all(i.request.token_count == 1 for i in sends[0].batch.items)  # sent as it came


def test_a_shorter_request_is_computed_where_it_is() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("short", bucket=32, tokens=6))
    [send] = of(ev.SendBatch, rig.tick())
    assert send.batch.bucket == 32 and send.real_tokens == 6


def test_the_committed_offset_of_a_bucket_waits_for_its_forwards() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("long", tokens=30), rig.request("fits", tokens=8))
    [send] = of(ev.SendBatch, rig.tick())
    rig.complete(send)
    assert committed(rig.tick(0.2), P16) <= 0  # offset 0 (the forward) is not done yet
    [forward] = of(ev.Forward, rig.actions)
    rig.handle(ev.AnswersDelivered([forward.ref]))
    assert committed(rig.tick(0.2), P16) == 2


def words(texts: object) -> list[int]:
    """A counter of words, as the rig's tokenizer counts (texts as a sequence of str)."""
    return [len(t.split()) for t in texts]  # type: ignore[attr-defined]


def test_a_polls_requests_are_counted_in_one_call_and_a_rejection_counts_nothing() -> None:
    calls: list[list[str]] = []

    def counter(texts: object) -> list[int]:
        calls.append(list(texts))  # type: ignore[call-overload]
        return words(texts)

    skipped = Rejection(ErrorCode.invalid_schema, "not a request")
    plain = [request(), skipped, request()]
    plain[0] = plain[0].model_copy(update={"input": "one two three"})
    assert count_requests(counter, plain) == [3, 0, 1]
    assert calls == [["one two three", "x"]]  # the plain poll: the inputs only, in one call
    pair = request().model_copy(update={"input": "a b", "input_pair": "c d e"})
    ids = request().model_copy(update={"input": "", "input_ids": [7, 8, 9]})
    mixed = [pair, skipped, ids, request()]
    assert count_requests(counter, mixed) == [5, 0, 3, 1]  # "" counts 0 words here
    assert calls[-1] == ["a b", "c d e", "", "x"]


def test_a_request_whose_count_raises_becomes_a_rejection_and_the_rest_are_counted() -> None:
    def counter(texts: object) -> list[int]:
        if any("boom" in t for t in texts):  # type: ignore[attr-defined]
            raise ValueError("cannot")
        return words(texts)

    parsed: list[Request | Rejection] = [
        request().model_copy(update={"input": "fine text"}),
        request().model_copy(update={"input": "boom"}),
    ]
    assert count_requests(counter, parsed) == [2, 0]
    rejected = parsed[1]
    assert isinstance(rejected, Rejection) and rejected.code is ErrorCode.invalid_schema
    assert "could not be tokenized: ValueError" in rejected.message
