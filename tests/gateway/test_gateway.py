"""The HTTP gateway as a user meets it: a real uvicorn process, a real HTTP client, the
real pipeline behind it. OpenAI-format round trip, tenant isolation, auth, error shape."""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from headrace.config.settings import Settings
from headrace.jobs.webhooks import SIGNATURE, verify
from headrace.ops.processes import Pipeline
from headrace.schemas.topics import Topics
from tests.eventually import eventually
from tests.gateway.gateway_proc import auth, finished, running_gateway
from tests.integration.topics import read_topic

pytestmark = pytest.mark.timeout(300)

HOOK_SECRET = b"acme-webhook-secret"


@pytest.fixture
def gateway(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    secrets = tmp_path / "webhook-secrets"
    secrets.mkdir()
    (secrets / "acme").write_bytes(HOOK_SECRET)  # globex has none: no webhooks for it
    env = {
        "HEADRACE_TOPIC_PREFIX": shared_prefix,
        "HEADRACE_WEBHOOK_ALLOWED_HOSTS": '["127.0.0.1"]',  # the test's receiver
        "HEADRACE_WEBHOOK_SECRETS_DIR": str(secrets),
    }
    with running_gateway(env, tmp_path) as running:
        yield running


def test_batch_round_trip_isolation_and_errors(gateway: tuple[str, dict[str, str]]) -> None:
    url, keys = gateway
    acme, globex = auth(keys["acme"]), auth(keys["globex"])
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/openapi.json").json()["info"]["title"] == "headrace gateway"
        lines = [
            json.dumps(
                {
                    "custom_id": f"r{i}",
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": {"model": "all-MiniLM-L6-v2", "input": f"gateway text {i}"},
                }
            )
            for i in range(12)
        ] + ["not json"]
        upload = http.post(
            "/v1/files",
            headers=acme,
            files={"file": ("in.jsonl", "\n".join(lines).encode())},
            data={"purpose": "batch"},
        )
        assert upload.status_code == 200, upload.text
        file_id = upload.json()["id"]
        assert upload.json()["object"] == "file" and upload.json()["bytes"] > 0

        created = http.post(
            "/v1/batches",
            headers=acme,
            json={
                "input_file_id": file_id,
                "endpoint": "/v1/embeddings",
                "completion_window": "24h",
            },
        )
        assert created.status_code == 200, created.text
        batch = created.json()
        assert batch["object"] == "batch" and batch["status"] == "validating"
        batch_id = batch["id"]
        batch = eventually(
            lambda: finished(http.get(f"/v1/batches/{batch_id}", headers=acme).json()),
            120,
            "the batch",
        )
        assert batch["status"] == "completed", batch
        assert batch["request_counts"] == {"total": 13, "completed": 12, "failed": 1}
        out = http.get(f"/v1/files/{batch['output_file_id']}/content", headers=acme)
        outputs = [json.loads(x) for x in out.text.splitlines()]
        assert sorted(o["custom_id"] for o in outputs) == sorted(f"r{i}" for i in range(12))
        assert all(list(o) == ["id", "custom_id", "response", "error"] for o in outputs)
        assert all(len(o["response"]["body"]["data"][0]["embedding"]) == 384 for o in outputs)
        errors = http.get(f"/v1/files/{batch['error_file_id']}/content", headers=acme).text
        assert json.loads(errors)["error"]["code"] == "invalid_line"
        listed = http.get("/v1/batches", headers=acme).json()
        assert [b["id"] for b in listed["data"]] == [batch["id"]]

        # another tenant sees none of it: 404 in OpenAI's error shape
        for path in (f"/v1/files/{file_id}", f"/v1/batches/{batch['id']}"):
            other = http.get(path, headers=globex)
            assert other.status_code == 404
            assert set(other.json()["error"]) == {"message", "type", "param", "code"}
        assert http.get("/v1/batches", headers=globex).json()["data"] == []
        cancel = http.post(f"/v1/batches/{batch['id']}/cancel", headers=globex)
        assert cancel.status_code == 404

        # health and metrics: probed and scraped without a key
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json() == {"status": "ready"}
        scraped = http.get("/metrics")
        assert scraped.status_code == 200 and "process_cpu_seconds_total" in scraped.text

        # no key, a wrong key
        assert http.get("/v1/batches").json()["error"]["code"] == "missing_api_key"
        wrong = http.get("/v1/batches", headers=auth("hr-not-a-key"))
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"


def test_synchronous_embeddings(gateway: tuple[str, dict[str, str]]) -> None:
    url, keys = gateway
    with httpx.Client(base_url=url, timeout=60, headers=auth(keys["acme"])) as http:
        ok = http.post(
            "/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": ["a river", "a canal"]}
        )
        assert ok.status_code == 200, ok.text
        body = ok.json()
        assert [d["index"] for d in body["data"]] == [0, 1]
        assert len(body["data"][1]["embedding"]) == 384 and body["usage"]["prompt_tokens"] > 0
        unknown = http.post("/v1/embeddings", json={"model": "gpt-9", "input": "x"})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"
        empty = http.post("/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "  "})
        assert empty.status_code == 400 and empty.json()["error"]["type"] == "invalid_request_error"
        # the gateway's own series: by route template and status, scrapes not counted
        scraped = http.get("/metrics").text
        route = 'route="/v1/embeddings"'
        assert f'headrace_gateway_requests_total{{method="POST",{route},status="200"}}' in scraped
        assert f'headrace_gateway_requests_total{{method="POST",{route},status="404"}}' in scraped
        assert f"headrace_gateway_request_seconds_count{{{route}}}" in scraped
        assert 'route="/metrics"' not in scraped
        http.get("/v1/no-such-thing")
        scraped = http.get("/metrics").text
        assert 'route="unmatched",status="404"' in scraped


def test_a_callers_trace_context_travels_to_the_records_and_the_reply(
    gateway: tuple[str, dict[str, str]], shared_settings: Settings
) -> None:
    """No SDK in these processes: the caller's traceparent reaches the request record, the
    worker (through the Celery task) and the reply record unchanged."""
    url, keys = gateway
    trace_id = uuid.uuid4().hex
    traceparent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
    text = f"traced through the gateway {trace_id}"
    with httpx.Client(base_url=url, timeout=60, headers=auth(keys["acme"])) as http:
        ok = http.post(
            "/v1/embeddings",
            json={"model": "all-MiniLM-L6-v2", "input": text},
            headers={"traceparent": traceparent},
        )
    assert ok.status_code == 200, ok.text
    topics = Topics(shared_settings.topic_prefix)
    requests = [
        r
        for b in shared_settings.buckets
        for r in read_topic(shared_settings, topics.requests(b))
        if text.encode() in r.value
    ]
    assert [r.header("traceparent") for r in requests] == [traceparent.encode()]
    request_id = json.loads(requests[0].value)["request_id"]
    replies = [
        r
        for r in read_topic(shared_settings, topics.replies("default"))
        if request_id.encode() in r.value
    ]
    assert [r.header("traceparent") for r in replies] == [traceparent.encode()]


def test_single_async_job_with_webhook(gateway: tuple[str, dict[str, str]]) -> None:
    url, keys = gateway
    received: list[dict[str, object]] = []
    signed: list[bool] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            signed.append(verify(HOOK_SECRET, self.headers.get(SIGNATURE, ""), body))
            received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    hook = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    hook_url = f"http://127.0.0.1:{hook.server_address[1]}/done"
    try:
        with httpx.Client(base_url=url, timeout=30, headers=auth(keys["acme"])) as http_client:
            created = http_client.post(
                "/v1/jobs",
                json={"input": "one text, later", "webhook_url": hook_url, "metadata": {"k": "v"}},
            )
            assert created.status_code == 200, created.text
            job = created.json()
            assert job["object"] == "job" and job["response"] is None
            eventually(lambda: received, 90, "the webhook call")
            done = http_client.get(f"/v1/jobs/{job['id']}").json()
            assert done == received[0] and signed == [True]  # signed with acme's secret
            assert done["status"] == "completed" and done["metadata"] == {"k": "v"}
            assert len(done["response"]["body"]["data"][0]["embedding"]) == 384
            other = http_client.get(f"/v1/jobs/{job['id']}", headers=auth(keys["globex"]))
            assert other.status_code == 404
            listed = http_client.get("/v1/batches").json()["data"]
            assert job["id"] not in [b["id"] for b in listed]  # a job is not a batch

            for target, key in (("http://10.0.0.1/hook", "acme"), (hook_url, "globex")):
                refused = http_client.post(
                    "/v1/jobs",
                    json={"input": "x", "webhook_url": target},
                    headers=auth(keys[key]),
                )
                assert refused.status_code == 403, refused.text  # private range; no secret
                error = refused.json()["error"]
                assert (error["code"], error["param"]) == ("webhook_not_allowed", "webhook_url")
    finally:
        hook.shutdown()
