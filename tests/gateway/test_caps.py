"""What one tenant may hold at the gateway, through the official SDK against a real gateway
process: files that expire (OpenAI's expires_after), and caps on a tenant's files, their
bytes and its jobs not yet ended, each a 429 naming the cap; another tenant is not held."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from headrace.ops.localstack import LocalStack
from tests.conftest import unique_prefix
from tests.gateway.gateway_proc import running_gateway

pytestmark = pytest.mark.timeout(300)

LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", '
LINE += b'"body": {"model": "all-MiniLM-L6-v2", "input": "x"}}\n'


@pytest.fixture
def sdks(stack: LocalStack, tmp_path: Path) -> Iterator[dict[str, openai.OpenAI]]:
    env = {
        "HEADRACE_TOPIC_PREFIX": unique_prefix("caps"),
        "HEADRACE_JOB_RUNNERS": "0",  # jobs stay open: nobody carries them out
        "HEADRACE_TENANT_MAX_FILES": "2",
        "HEADRACE_TENANT_MAX_FILE_BYTES": str(3 * len(LINE)),
        "HEADRACE_TENANT_MAX_OPEN_JOBS": "1",
    }
    with running_gateway(env, tmp_path) as (url, keys):
        clients = {
            t: openai.OpenAI(base_url=f"{url}/v1", api_key=k, max_retries=0)
            for t, k in keys.items()
        }
        yield clients
        for client in clients.values():
            client.close()


def upload(sdk: openai.OpenAI, lines: int = 1, **options: object) -> openai.types.FileObject:
    data = io.BytesIO(LINE * lines)
    return sdk.files.create(file=("in.jsonl", data), purpose="batch", **options)  # type: ignore[arg-type]


def test_files_expire_and_a_tenant_s_files_bytes_and_open_jobs_are_capped(
    sdks: dict[str, openai.OpenAI],
) -> None:
    acme, globex = sdks["acme"], sdks["globex"]
    brief = upload(acme, expires_after={"anchor": "created_at", "seconds": 3600})
    assert brief.expires_at == brief.created_at + 3600
    with pytest.raises(openai.BadRequestError) as short:
        upload(globex, expires_after={"anchor": "created_at", "seconds": 60})
    assert "expires_after[seconds]" in str(short.value)

    second = upload(acme)
    assert second.expires_at is None
    with pytest.raises(openai.RateLimitError) as files:
        upload(acme)  # a third file: past tenant_max_files
    assert files.value.code == "files_limit_exceeded"
    upload(globex)  # another tenant is not held
    acme.files.delete(second.id)
    with pytest.raises(openai.RateLimitError) as size:
        upload(acme, lines=3)  # 1 + 3 lines: past tenant_max_file_bytes (3 lines)
    assert size.value.code == "storage_limit_exceeded"
    assert [f.id for f in acme.files.list()] == [brief.id]  # the refused upload left nothing

    acme.batches.create(input_file_id=brief.id, endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(openai.RateLimitError) as jobs:
        acme.batches.create(
            input_file_id=brief.id, endpoint="/v1/embeddings", completion_window="24h"
        )
    assert jobs.value.code == "open_jobs_limit_exceeded"
