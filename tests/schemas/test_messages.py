from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from headrace.schemas.errors import ErrorCode
from headrace.schemas.export import export_schemas
from headrace.schemas.messages import (
    Batch,
    BatchItem,
    CacheDirective,
    Degraded,
    EmbeddingResult,
    GenerationResult,
    RecordRef,
    Reply,
    Request,
    StreamDelta,
    Usage,
    parse_reply_record,
)
from headrace.schemas.params import GenerateParams, ScoreParams
from headrace.schemas.signing import request_signature
from headrace.schemas.tenants import TenantNameError, check_tenant
from headrace.schemas.wire import batch_body, request_body
from tests.schemas.requests import request


def test_request_round_trips_as_json_with_schema_version() -> None:
    original = request(token_count=3)
    wire = json.loads(original.model_dump_json())
    assert wire["schema_version"] == 1
    assert Request.model_validate_json(original.model_dump_json()) == original
    given = request(input="", input_ids=[101, 7, 102])
    assert Request.model_validate_json(given.model_dump_json()).input_ids == [101, 7, 102]


@pytest.mark.parametrize(
    "bad",
    [
        {"request_id": ""},
        {"request_id": "has space"},
        {"tenant": "x" * 300},
        {"schema_version": 2},
        {"unexpected": 1},
        {"token_count": -1},
        {"deadline": "2026-01-01T00:00:00"},  # naive datetimes are refused
        {"input_ids": [1, 2]},  # token ids with an input text
        {"input": "", "input_ids": []},
        {"input": "", "input_ids": [-1]},
        {"input": "", "input_ids": [1], "task": "generate"},  # a prompt is text
    ],
)
def test_request_rejects_bad_fields(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        request(**bad)


def test_reply_carries_exactly_one_of_result_and_error() -> None:
    with pytest.raises(ValidationError):
        Reply(request_id="r", tenant="t", model="m")
    with pytest.raises(ValidationError):
        Reply(
            request_id="r",
            tenant="t",
            model="m",
            result=EmbeddingResult(embedding=[1.0], token_count=1),
            error={"code": "internal", "message": "x"},  # type: ignore[arg-type]
        )
    failure = Reply.failure("r", "t", "m", ErrorCode.cancelled, "stopped")
    assert failure.error is not None and failure.error.code is ErrorCode.cancelled


def test_exported_json_schema_validates_what_pydantic_accepts(tmp_path: Path) -> None:
    paths = {p.name: p for p in export_schemas(tmp_path)}
    assert set(paths) == {
        "request.v1.json",
        "reply.v1.json",
        "dead-letter.v1.json",
        "invalidation.v1.json",
        "stream-delta.v1.json",
        "model-manifest.v1.json",
    }
    schema = json.loads(paths["request.v1.json"].read_text())
    jsonschema.validate(json.loads(request().model_dump_json()), schema)
    generate = request().model_copy(update={"task": "generate", "params": GenerateParams()})
    jsonschema.validate(json.loads(generate.model_dump_json()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"request_id": "r"}, schema)
    hint = schema["properties"]["token_count"]["description"]  # both ways in, documented
    assert "hint" in hint and "<prefix>.requests" in hint
    delta = StreamDelta(request_id="r", tenant="t", model="m", seq=0, text="hi")
    jsonschema.validate(
        json.loads(delta.model_dump_json()),
        json.loads(paths["stream-delta.v1.json"].read_text()),
    )


def test_generate_requests_take_generate_params() -> None:
    base = json.loads(request().model_dump_json())
    gen = Request.model_validate({**base, "task": "generate", "params": {"max_tokens": 5}})
    assert isinstance(gen.params, GenerateParams) and gen.params.max_tokens == 5
    assert isinstance(Request.model_validate_json(gen.model_dump_json()).params, GenerateParams)
    defaulted = Request.model_validate({**base, "task": "generate", "params": {}})
    assert defaulted.params == GenerateParams()
    for bad in (
        {**base, "params": {"max_tokens": 5}},  # an embed request with generate params
        {**base, "task": "generate", "params": {"normalize": False}},
        {**base, "task": "generate", "params": {"max_tokens": 0}},
        {**base, "task": "generate", "params": {"temperature": -1}},
        {**base, "task": "generate", "params": {"stop": [""]}},
        {**base, "task": "translate"},
    ):
        with pytest.raises(ValidationError):
            Request.model_validate(bad)


def test_a_reply_topic_record_is_a_reply_or_a_delta() -> None:
    delta = StreamDelta(request_id="r", tenant="t", model="m", seq=3, text='"type":"delta"')
    assert parse_reply_record(delta.model_dump_json().encode()) == delta
    final = Reply(
        request_id="r",
        tenant="t",
        model="m",
        result=GenerationResult(
            text='say "type":"delta"',
            finish_reason="stop",
            usage=Usage(prompt_tokens=2, completion_tokens=4),
        ),
    )
    assert parse_reply_record(final.model_dump_json().encode()) == final
    with pytest.raises(ValidationError):
        parse_reply_record(b'{"type":"delta"}')


def test_an_invalidation_says_what_it_invalidates() -> None:
    from headrace.schemas.cache import Invalidation

    assert Invalidation(tenant="acme", tags=["doc:1"]).tags == ["doc:1"]
    assert Invalidation(model="m", model_version="v2").tenant is None
    for bad in (
        {"tags": ["doc:1"]},  # whose tag?
        {"tenant": "acme"},  # nothing to do
        {"model": "m"},  # which version?
        {"tenant": "acme", "keys": ["not-a-sha256"]},
        {"tenant": "acme", "tags": ["has space"]},
    ):
        with pytest.raises(ValidationError):
            Invalidation.model_validate(bad)


@pytest.mark.parametrize("tenant", ["a:b", "", "a b", "x" * 65, "a/b", "é"])
def test_a_tenant_name_that_could_collide_in_a_key_is_refused_on_the_wire(tenant: str) -> None:
    doc = {
        "request_id": "r1",
        "tenant": tenant,
        "model": "m",
        "input": "hi",
        "reply_to": "p.replies.default",
    }
    with pytest.raises(ValidationError):
        Request.model_validate(doc)
    with pytest.raises(TenantNameError):
        check_tenant(tenant)
    assert check_tenant("acme_2-x") == "acme_2-x"


def test_an_embedding_comes_as_numbers_or_as_float32_bytes_and_reads_the_same() -> None:
    floats = EmbeddingResult(embedding=[0.5, -1.25, 3.0], token_count=3)
    packed = EmbeddingResult(embedding_base64=floats.as_base64(), token_count=3)
    assert packed.vector() == floats.vector() == [0.5, -1.25, 3.0]
    assert packed.as_base64() == floats.as_base64() == "AAAAPwAAoL8AAEBA"  # <f4 bytes
    again = EmbeddingResult.model_validate_json(packed.model_dump_json())
    assert again.vector() == [0.5, -1.25, 3.0]
    with pytest.raises(ValidationError):
        EmbeddingResult(token_count=3)  # neither
    with pytest.raises(ValidationError):
        EmbeddingResult(embedding=[1.0], embedding_base64="AACAPw==", token_count=1)  # both


def test_a_batch_carries_the_records_as_the_dispatcher_read_them() -> None:
    """Requests whose records were kept go in as those bytes (any spacing, any key order);
    the others are serialised; either way the worker reads back the same batch."""
    requests = [
        request(),
        request(task="generate", params=GenerateParams(max_tokens=8)),
        request(deadline=datetime(2026, 12, 7, 12, 0, tzinfo=UTC)),
    ]
    refs = [RecordRef(topic="p.requests.b16", partition=0, offset=i) for i in range(3)]
    items = [
        BatchItem(request=r, ref=ref, arrived_at=2.0, compare_with="v1" if i else None)
        for i, (r, ref) in enumerate(zip(requests, refs, strict=True))
    ]
    as_read = {
        (ref.topic, ref.partition, ref.offset): json.dumps(
            dict(reversed(r.model_dump(mode="json").items())), indent=1
        ).encode()
        for r, ref in list(zip(requests, refs, strict=True))[:2]  # the third was not kept
    }
    batch = Batch(batch_id="b-2", bucket=16, dispatcher_id="d1", dispatched_at=1.0, items=items)
    body = batch_body(batch.keep_records_read(as_read))
    assert all(record.decode() in body for record in as_read.values())
    # (compared as dumped: a model's equality counts the records it keeps)
    assert Batch.model_validate_json(body).model_dump() == batch.model_dump()
    assert Batch.model_validate_json(batch_body(batch.keep_records_read({}))) == batch


def test_a_batch_body_leaves_defaults_out_and_reads_back_as_the_same_batch() -> None:
    ref = RecordRef(topic="p.requests.b16", partition=1, offset=7)
    deadline = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    requests = [
        request(),  # every field it can leave at its default
        request(task="generate", params=GenerateParams(), session_id="s-1"),  # default params
        request(task="generate", params=GenerateParams(max_tokens=64, temperature=0.7, seed=3)),
        request(task="rerank", input_pair="a document", params=ScoreParams(truncate=True)),
        request(
            deadline=deadline,
            priority="batch",
            vector_encoding="base64",
            token_count=0,  # a falsy value that is not the default (None)
            routing_key="k",
            cache=CacheDirective(tags=["doc:1"], generations={"tag:acme:doc:1": 0}),
            params={"truncate": False, "normalize": False},
        ),
    ]
    items = [BatchItem(request=r, ref=ref, arrived_at=0.0) for r in requests] + [
        BatchItem(
            request=request(),
            ref=ref,
            arrived_at=1.5,
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            compare_with="v1",
            degraded=Degraded(rung="fallback_version", reason="no_workers"),
        )
    ]
    batch = Batch(
        batch_id="b-1",
        bucket=16,
        dispatcher_id="d1",
        attempt=2,
        dispatched_at=1.0,
        items=items,
        lane="bulk",
        model_version="v2",
        shadow=True,
    )
    body = batch_body(batch)
    assert Batch.model_validate_json(body) == batch
    assert Batch.model_validate_json(batch_body(batch.model_copy(update={"attempt": 1}))) == (
        batch.model_copy(update={"attempt": 1})
    )
    first = json.loads(body)["items"][0]["request"]
    assert "input_pair" not in first and "signature" not in first and "params" not in first
    assert "created_at" in first  # made when the request was, not a default to fill again
    assert len(body) < 0.8 * len(batch.model_dump_json())


def test_a_request_record_leaves_defaults_out_and_its_signature_still_verifies() -> None:
    unsigned = request(task="generate", params=GenerateParams(max_tokens=8), session_id="s-1")
    signed = unsigned.model_copy(
        update={"signature": request_signature(b"acme-key", unsigned.signable())}
    )
    body = request_body(signed)
    read = Request.model_validate_json(body)
    assert read == signed
    # what the dispatcher checks: the signature over the full JSON made from what it read
    assert read.signature == request_signature(b"acme-key", read.signable())
    fields = json.loads(body)
    assert "input_pair" not in fields and "priority" not in fields
    assert fields["params"] == {"max_tokens": 8}
    assert len(body) < 0.8 * len(signed.model_dump_json())
