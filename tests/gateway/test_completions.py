"""``/v1/completions`` and ``/v1/chat/completions`` on a real gateway process, a real HTTP
client, and a pipeline serving headrace-test-lm (the locally built TEST MODEL): the OpenAI
shapes, SSE streams that add up to the non-streamed text, and typed errors."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pydantic
import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.models import tiny_lm
from headrace.models.register import register
from headrace.models.registry import model_spec
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.schemas.control import Control
from headrace.schemas.topics import Topics
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.gateway.gateway_proc import auth, completed_job, finished, running_gateway
from tests.integration.topics import read_topic
from tests.tool_schemas import FLOW, NO_ARGUMENTS

pytestmark = pytest.mark.timeout(300)
PREFIX = [""]  # the module's pipeline's topic prefix
TEMPLATED = "templated-lm"  # registered in the module's own registry


@pytest.fixture(scope="module")
def gateway(
    stack: LocalStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    prefix = unique_prefix("completions")
    PREFIX[0] = prefix
    tmp_path: Path = tmp_path_factory.mktemp("gateway")
    env = pipeline_env(
        prefix,
        HEADRACE_MODEL=tiny_lm.NAME,
        HEADRACE_MAX_WAIT_MS="50",
        HEADRACE_SQL_URL=f"sqlite:///{tmp_path}/gateway.db",  # a registry of its own
    )
    templated = tmp_path / "templated"  # the test LM with a chat template, no tool format
    shutil.copytree(model_spec(tiny_lm.NAME).path, templated)
    config = json.loads((templated / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    (templated / "tokenizer_config.json").write_text(json.dumps(config))
    settings = Settings(sql_url=env["HEADRACE_SQL_URL"], state_dir=tmp_path / "state")
    register(settings, TEMPLATED, str(templated), "v1")
    with Pipeline(env=env), running_gateway(env, tmp_path, tenants=("acme",)) as running:
        yield running


def sse_events(response: httpx.Response) -> list[dict[str, object] | str]:
    events: list[dict[str, object] | str] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_completions_plain_and_streamed(gateway: tuple[str, dict[str, str]]) -> None:
    url, keys = gateway
    body = {"model": tiny_lm.NAME, "prompt": "The headrace", "max_tokens": 10, "temperature": 0}
    with httpx.Client(base_url=url, timeout=120, headers=auth(keys["acme"])) as http:
        plain = http.post("/v1/completions", json=body)
        assert plain.status_code == 200, plain.text
        out = plain.json()
        assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
        choice = out["choices"][0]
        assert choice["finish_reason"] in ("stop", "length") and choice["text"]
        usage = out["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = sse_events(streamed)
        assert events[-1] == "[DONE]"
        chunks = [e for e in events if isinstance(e, dict)]
        text = "".join(str(c["choices"][0]["text"]) for c in chunks)  # type: ignore[index]
        assert text == choice["text"]
        assert chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]  # type: ignore[index]


def test_chat_completions_plain_and_streamed(gateway: tuple[str, dict[str, str]]) -> None:
    url, keys = gateway
    body = {
        "model": tiny_lm.NAME,
        "messages": [
            {"role": "system", "content": "You run a mill."},
            {"role": "user", "content": "Where does the water go?"},
        ],
        "max_completion_tokens": 8,
        "temperature": 0,
    }
    with httpx.Client(base_url=url, timeout=120, headers=auth(keys["acme"])) as http:
        plain = http.post("/v1/chat/completions", json=body)
        assert plain.status_code == 200, plain.text
        out = plain.json()
        assert out["object"] == "chat.completion"
        message = out["choices"][0]["message"]
        assert message["role"] == "assistant" and out["usage"]["completion_tokens"] <= 8
        with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as s:
            events = sse_events(s)
        chunks = [e for e in events if isinstance(e, dict)]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}  # type: ignore[index]
        pieces = [c["choices"][0]["delta"].get("content", "") for c in chunks]  # type: ignore[index]
        assert "".join(pieces) == message["content"] and events[-1] == "[DONE]"


def test_completion_errors_in_openai_shape(gateway: tuple[str, dict[str, str]]) -> None:
    url, keys = gateway
    with httpx.Client(base_url=url, timeout=60, headers=auth(keys["acme"])) as http:
        unknown = http.post("/v1/completions", json={"model": "gpt-9", "prompt": "x"})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"
        too_long = http.post(
            "/v1/completions", json={"model": tiny_lm.NAME, "prompt": " the wheel" * 400}
        )
        assert too_long.status_code == 400
        assert too_long.json()["error"]["code"] == "context_length_exceeded"
        last_not_user = http.post(
            "/v1/chat/completions",
            json={"model": tiny_lm.NAME, "messages": [{"role": "assistant", "content": "hi"}]},
        )
        assert last_not_user.status_code == 400
        assert last_not_user.json()["error"]["type"] == "invalid_request_error"
        anonymous = httpx.post(f"{url}/v1/completions", json={"model": tiny_lm.NAME, "prompt": "x"})
        assert anonymous.status_code == 401


def test_a_batch_file_of_chat_completions(gateway: tuple[str, dict[str, str]]) -> None:
    url, keys = gateway
    chat = "/v1/chat/completions"

    def body(i: int) -> dict[str, object]:
        messages = [{"role": "user", "content": f"Where does channel {i} lead?"}]
        return {"model": tiny_lm.NAME, "messages": messages, "max_tokens": 6, "temperature": 0}

    lines = [
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": chat, "body": body(i)})
        for i in range(5)
    ]
    lines.append(json.dumps({"custom_id": "e", "method": "POST", "url": chat, "body": {}}))
    with httpx.Client(base_url=url, timeout=120, headers=auth(keys["acme"])) as http:
        upload = http.post(
            "/v1/files",
            files={"file": ("chat.jsonl", "\n".join(lines).encode())},
            data={"purpose": "batch"},
        )
        assert upload.status_code == 200, upload.text
        created = http.post(
            "/v1/batches", json={"input_file_id": upload.json()["id"], "endpoint": chat}
        )
        assert created.status_code == 200, created.text
        batch = created.json()
        batch_id = batch["id"]
        batch = eventually(
            lambda: finished(http.get(f"/v1/batches/{batch_id}").json()), 120, "the batch"
        )
        assert batch["status"] == "completed", batch
        assert batch["endpoint"] == chat
        assert batch["request_counts"] == {"total": 6, "completed": 5, "failed": 1}
        out = http.get(f"/v1/files/{batch['output_file_id']}/content").text.splitlines()
        outputs = {o["custom_id"]: o for o in map(json.loads, out)}
        assert sorted(outputs) == [f"c{i}" for i in range(5)]
        direct = http.post(chat, json=body(3)).json()  # the same request, synchronously
        answer = outputs["c3"]["response"]["body"]
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["message"] == direct["choices"][0]["message"]


CHAT = [
    {"role": "system", "content": "You run a mill."},
    {"role": "user", "content": "Where does the water go?"},
]


def test_chat_with_the_official_sdk_sync_async_and_streamed(
    gateway: tuple[str, dict[str, str]],
) -> None:
    url, keys = gateway
    options = {"base_url": f"{url}/v1", "api_key": keys["acme"], "max_retries": 0}
    sdk = openai.OpenAI(**options)  # type: ignore[arg-type]
    plain = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,
        max_completion_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    text = plain.choices[0].message.content
    assert plain.choices[0].message.role == "assistant" and text
    assert plain.usage is not None and plain.usage.completion_tokens <= 8

    stream = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,  # type: ignore[arg-type]
        max_completion_tokens=8,
        temperature=0,
        stream=True,
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == text  # greedy: the stream adds up to the plain answer

    async def both() -> list[str | None]:
        async with openai.AsyncOpenAI(**options) as client:  # type: ignore[arg-type]
            calls = [
                client.chat.completions.create(
                    model=tiny_lm.NAME,
                    messages=CHAT,  # type: ignore[arg-type]
                    max_completion_tokens=8,
                    temperature=0,
                )
                for _ in range(2)
            ]
            return [r.choices[0].message.content for r in await asyncio.gather(*calls)]

    assert asyncio.run(both()) == [text, text]
    completion = sdk.completions.create(model=tiny_lm.NAME, prompt="The headrace", max_tokens=5)
    assert completion.choices[0].text and completion.object == "text_completion"
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="gpt-9", messages=CHAT)  # type: ignore[arg-type]
    sdk.close()


def test_single_jobs_take_completions_and_chat_as_well_as_embeddings(
    gateway: tuple[str, dict[str, str]],
) -> None:
    url, keys = gateway
    # greedy both: a sampled answer of the test LM may be its end-of-text token at once
    chat = {
        "model": tiny_lm.NAME,
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0,
    }
    prompt = {"model": tiny_lm.NAME, "prompt": "The headrace", "temperature": 0}
    with httpx.Client(base_url=url, timeout=60, headers=auth(keys["acme"])) as http:
        created = {
            kind: http.post("/v1/jobs", json={**body, "max_tokens": 6})
            for kind, body in (("chat.completion", chat), ("text_completion", prompt))
        }
        both = http.post("/v1/jobs", json={**chat, "prompt": "two requests in one"})
        assert both.status_code == 400 and both.json()["error"]["param"] == "input"
        empty = http.post("/v1/jobs", json={"model": tiny_lm.NAME, "prompt": "  "})
        assert empty.status_code == 400, empty.text
        for kind, response in created.items():
            assert response.status_code == 200, response.text
            job_id = response.json()["id"]
            job = eventually(
                lambda job_id=job_id: completed_job(http.get(f"/v1/jobs/{job_id}").json()),
                90,
                "the job",
            )
            body = job["response"]["body"]
            assert job["response"]["status_code"] == 200 and body["object"] == kind
            assert body["usage"]["completion_tokens"] <= 6
            text = body["choices"][0].get("message", {}).get("content") or body["choices"][0].get(
                "text"
            )
            assert text, body


def test_a_client_that_leaves_a_stream_cancels_its_request(
    gateway: tuple[str, dict[str, str]],
) -> None:
    url, keys = gateway
    body = {"model": tiny_lm.NAME, "prompt": "The headrace", "max_tokens": 400, "stream": True}
    with (
        httpx.Client(base_url=url, timeout=120, headers=auth(keys["acme"])) as http,
        http.stream("POST", "/v1/completions", json=body) as streamed,
    ):
        first = next(line for line in streamed.iter_lines() if line.startswith("data: "))
    request_id = json.loads(first.removeprefix("data: "))["id"].removeprefix("cmpl-")
    settings = Settings(topic_prefix=PREFIX[0])
    eventually(
        lambda: (
            request_id
            in [
                Control.model_validate_json(r.value).request_id
                for r in read_topic(settings, Topics(PREFIX[0]).control)
            ]
        ),
        20,
        "the cancellation on the control topic",
        every_s=0.2,
    )


def test_a_parameter_not_served_is_a_400_naming_it_never_dropped(
    gateway: tuple[str, dict[str, str]],
) -> None:
    url, keys = gateway
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0)
    asks: list[tuple[str, dict[str, object]]] = [
        ("logprobs", {"logprobs": True, "top_logprobs": 2, "stream": True}),
        (
            "response_format",  # a schema llguidance cannot enforce: refused, not ignored
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "frob"}},
                }
            },
        ),
        (
            "tool_choice",
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
        ),
        ("temprature", {"extra_body": {"temprature": 0}}),
    ]
    for field, options in asks:
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.chat.completions.create(
                model=tiny_lm.NAME,
                messages=CHAT,  # type: ignore[arg-type]
                max_completion_tokens=4,
                **options,  # type: ignore[arg-type]
            )
        error = caught.value.body
        assert isinstance(error, dict) and str(error["param"]).split(".")[0] == field, error
        assert field in str(error["message"])
    with pytest.raises(openai.BadRequestError) as echo:
        sdk.completions.create(model=tiny_lm.NAME, prompt="The headrace", echo=True)
    assert isinstance(echo.value.body, dict) and echo.value.body["param"] == "echo"
    with pytest.raises(openai.BadRequestError) as extra:
        sdk.embeddings.create(
            model="all-MiniLM-L6-v2", input="x", extra_body={"truncation": "auto"}
        )
    assert "Unrecognized request argument supplied: truncation" in str(extra.value)

    served = sdk.chat.completions.create(  # the values that ask for nothing pass
        model=tiny_lm.NAME,
        messages=CHAT,  # type: ignore[arg-type]
        max_completion_tokens=4,
        n=1,
        logprobs=False,
        response_format={"type": "text"},
        presence_penalty=0.5,
        frequency_penalty=0.5,
        logit_bias={"50": -100},
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(served)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None  # OpenAI's usage chunk
    assert 0 < chunks[-1].usage.completion_tokens <= 4
    sdk.close()


def test_n_choices_plain_and_streamed_with_the_official_sdk(
    gateway: tuple[str, dict[str, str]],
) -> None:
    url, keys = gateway
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0)
    greedy = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,  # type: ignore[arg-type]
        max_completion_tokens=5,
        temperature=0,
        n=3,
    )
    assert [c.index for c in greedy.choices] == [0, 1, 2]
    texts = {c.message.content for c in greedy.choices}
    assert len(texts) == 1 and texts != {""}  # greedy: three times the same answer
    assert greedy.usage is not None and greedy.usage.completion_tokens <= 15
    one = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,  # type: ignore[arg-type]
        max_completion_tokens=5,
        temperature=0,
    )
    assert greedy.usage.prompt_tokens == one.usage.prompt_tokens  # type: ignore[union-attr]
    sampled = sdk.completions.create(
        model=tiny_lm.NAME, prompt="The headrace", max_tokens=8, temperature=1.5, seed=3, n=4
    )
    assert len({c.text for c in sampled.choices}) > 1  # seeds 3..6: the choices differ

    stream = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,  # type: ignore[arg-type]
        max_completion_tokens=5,
        temperature=0,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: dict[int, str] = {0: "", 1: ""}
    finished: set[int] = set()
    chunks = list(stream)
    for chunk in chunks:
        for choice in chunk.choices:
            pieces[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                finished.add(choice.index)
    assert finished == {0, 1}
    assert pieces[0] == pieces[1] == one.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 2 * (one.usage.completion_tokens)  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):  # every choice fails at once: a 404, not a 500
        sdk.chat.completions.create(
            model="gpt-9",
            messages=CHAT,  # type: ignore[arg-type]
            n=3,
            stream=True,
        )
    sdk.close()


class Mill(pydantic.BaseModel):
    """A structured answer the random-weight test LM can only give through the mask."""

    model_config = pydantic.ConfigDict(extra="forbid")
    wheel: Literal["overshot", "undershot", "breastshot"]
    stones: int = pydantic.Field(ge=1, le=4)
    parts: list[Literal["shaft", "paddle", "sluice"]] = pydantic.Field(max_length=3)


def test_structured_output_with_the_official_sdk_parse_and_json_object(
    gateway: tuple[str, dict[str, str]],
) -> None:
    """``chat.completions.parse`` sends the model's JSON Schema (strict) and parses the
    answer into it; it fails on anything else, so every answer below is valid."""
    url, keys = gateway
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0)
    for seed in range(4):
        parsed = sdk.chat.completions.parse(
            model=tiny_lm.NAME,
            messages=CHAT,  # type: ignore[arg-type]
            response_format=Mill,
            temperature=1.0,
            seed=seed,
            max_completion_tokens=120,
        )
        choice = parsed.choices[0]
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, Mill), choice.message.content
    as_object = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,  # type: ignore[arg-type]
        response_format={"type": "json_object"},
        temperature=0.0,
        max_completion_tokens=200,
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in as_object if c.choices)
    assert text.startswith("{")  # streamed deltas of the same constrained text
    sdk.close()


def test_logprobs_with_the_official_sdk_chat_and_completions(
    gateway: tuple[str, dict[str, str]],
) -> None:
    url, keys = gateway
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0)
    chat = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,  # type: ignore[arg-type]
        max_completion_tokens=8,
        temperature=0.0,
        logprobs=True,
        top_logprobs=3,
    )
    choice = chat.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    assert chat.usage is not None and len(content) == chat.usage.completion_tokens
    assert all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in content)
    assert all(t.token == t.top_logprobs[0].token for t in content)  # greedy: the likeliest
    spelled = b"".join(bytes(t.bytes or []) for t in content)
    assert spelled.decode() == choice.message.content  # the tokens' bytes are the text's
    legacy = sdk.completions.create(
        model=tiny_lm.NAME, prompt="The headrace", max_tokens=6, temperature=0.0, logprobs=2
    )
    got = legacy.choices[0].logprobs
    assert got is not None and got.tokens is not None and got.top_logprobs is not None
    assert len(got.tokens) == len(got.top_logprobs) == legacy.usage.completion_tokens  # type: ignore[union-attr]
    assert all(len(alternatives) == 2 for alternatives in got.top_logprobs)
    plain = sdk.chat.completions.create(
        model=tiny_lm.NAME,
        messages=CHAT,
        max_completion_tokens=2,  # type: ignore[arg-type]
    )
    assert plain.choices[0].logprobs is None
    sdk.close()


TOOLS = [
    {"type": "function", "function": {"name": "get_flow", "parameters": FLOW, "strict": True}},
    {"type": "function", "function": {"name": "stop_wheel", "description": "Stops the wheel"}},
]
ARGUMENTS = {"get_flow": FLOW, "stop_wheel": NO_ARGUMENTS}


def called(message: Any) -> list[tuple[str, dict[str, Any]]]:
    """The message's calls, each a declared tool with arguments valid for it."""
    assert message.content is None and message.tool_calls, message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    for name, arguments in calls:
        jsonschema.validate(arguments, ARGUMENTS[name])
    return calls


def test_tools_with_the_official_sdk_sync_async_and_streamed(
    gateway: tuple[str, dict[str, str]],
) -> None:
    """The random-weight test LM calls tools only because the grammar makes it: every
    answer below is a declared function with arguments valid against its schema."""
    url, keys = gateway
    options = {"base_url": f"{url}/v1", "api_key": keys["acme"], "max_retries": 0}
    sdk = openai.OpenAI(**options)  # type: ignore[arg-type]
    ask: dict[str, Any] = {
        "model": tiny_lm.NAME,
        "messages": CHAT,
        "tools": TOOLS,
        "max_completion_tokens": 120,
        "parallel_tool_calls": False,
    }
    for seed in range(3):
        answer = sdk.chat.completions.create(**ask, tool_choice="required", seed=seed)
        assert answer.choices[0].finish_reason == "tool_calls"
        assert len(called(answer.choices[0].message)) == 1  # parallel_tool_calls false
    named = sdk.chat.completions.create(
        **ask, tool_choice={"type": "function", "function": {"name": "get_flow"}}, temperature=0
    )
    ((name, arguments),) = called(named.choices[0].message)
    assert name == "get_flow"

    streamed = sdk.chat.completions.create(
        **ask,
        tool_choice={"type": "function", "function": {"name": "get_flow"}},
        temperature=0,
        stream=True,
    )
    chunks = [c for c in streamed if c.choices]
    deltas = [t for c in chunks for t in c.choices[0].delta.tool_calls or []]
    assert all(not c.choices[0].delta.content for c in chunks)  # no call text as content
    assert [(d.function.name, json.loads(d.function.arguments or "")) for d in deltas] == [
        (name, arguments)  # greedy: the stream's call is the plain answer's
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    call = named.choices[0].message.tool_calls[0]  # type: ignore[index]
    answered = sdk.chat.completions.create(  # the tool's result sent back: a text answer
        model=tiny_lm.NAME,
        messages=[
            *CHAT,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "full to the brim"},
        ],  # type: ignore[list-item]
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice="none",
        max_completion_tokens=6,
    )
    assert answered.choices[0].message.content and not answered.choices[0].message.tool_calls

    async def required() -> list[Any]:
        async with openai.AsyncOpenAI(**options) as client:  # type: ignore[arg-type]
            calls = [
                client.chat.completions.create(**ask, tool_choice="required", seed=s)
                for s in range(2)
            ]
            return [r.choices[0].message for r in await asyncio.gather(*calls)]

    for message in asyncio.run(required()):
        called(message)
    with pytest.raises(openai.BadRequestError) as refused:  # its template has no tool format
        sdk.chat.completions.create(**{**ask, "model": TEMPLATED})
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "tools"
    assert "no tool format" in str(refused.value.body["message"])
    sdk.close()


def test_with_its_header_a_reworded_chat_is_answered_from_the_semantic_cache(
    gateway: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """A gateway whose tenant opted in; the OpenAI SDK asks with ``extra_headers``. A
    sampled answer (temperature 0.8) is remembered once; a reworded question gets the same
    text and remembers nothing new; without the header it is computed."""
    env = pipeline_env(
        PREFIX[0],
        HEADRACE_MODEL=tiny_lm.NAME,
        HEADRACE_CACHE_ENABLED="true",
        HEADRACE_CACHE_SEMANTIC_TENANTS='["acme"]',
    )
    redis = connections.redis_client(Settings(topic_prefix=PREFIX[0]))

    def remembered() -> int:
        return sum(int(redis.xlen(k)) for k in redis.scan_iter(f"{PREFIX[0]}:semantic:*"))

    question = f"How do I reset the password of account {uuid.uuid4().hex[:6]}?"
    with running_gateway(env, tmp_path, tenants=("acme",), name="semantic") as (url, keys):
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["acme"], max_retries=0)
        header = {"x-headrace-semantic-cache": "true"}

        def ask(content: str, **options: Any) -> str | None:
            answer = sdk.chat.completions.create(
                model=tiny_lm.NAME,
                messages=[{"role": "user", "content": content}],
                max_tokens=8,
                temperature=0.8,
                **options,
            )
            return answer.choices[0].message.content

        before = remembered()
        first = ask(question, extra_headers=header)
        eventually(lambda: remembered() == before + 1, 10, "the answer remembered")
        assert ask(f"Can you explain this: {question}", extra_headers=header) == first
        ask(f"Can you explain this: {question}")  # computed: not looked up, not remembered
        assert remembered() == before + 1
