"""A fuzz pass over the gateway's own OpenAPI schema (schemathesis): every operation gets
generated requests, valid and not, against a real gateway process with the real pipeline
behind it. None may get a 5xx; every error comes back in OpenAI's shape; every response has
a request id. (``POST /v1/jobs`` makes jobs the gateway's runner pool carries out; a
generated ``webhook_url`` is refused: this gateway's tenant has no webhook secret.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.schemas import BaseSchema

from headrace.ops.processes import Pipeline
from tests.gateway.gateway_proc import running_gateway

pytestmark = pytest.mark.timeout(600)

ERROR_TYPES = {"invalid_request_error", "requests", "server_error"}
EXAMPLES = 20  # per operation and mode
WITH_INPUT = {
    "POST /v1/embeddings",
    "POST /v1/completions",
    "POST /v1/chat/completions",
    "POST /v1/files",
    "GET /v1/files",
    "POST /v1/batches",
    "GET /v1/batches",
    "POST /v1/jobs",
}


@pytest.fixture(scope="module")
def fuzzed_gateway(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    env = {"HEADRACE_TOPIC_PREFIX": shared_prefix}
    with running_gateway(env, tmp_path_factory.mktemp("fuzz"), tenants=("acme",)) as (url, keys):
        yield url, keys["acme"]


@pytest.fixture(scope="module")
def gateway_schema(fuzzed_gateway: tuple[str, str]) -> BaseSchema:
    url, _ = fuzzed_gateway
    return schemathesis.openapi.from_url(f"{url}/openapi.json")


def check(case: Case, url: str, key: str) -> None:
    response = case.call(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    where = f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
    assert response.status_code < 500, where
    assert response.headers.get("x-request-id"), where
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, where
        assert error["type"] in ERROR_TYPES and error["message"], where


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_5xx_and_every_error_in_openai_shape(
    gateway_schema: BaseSchema, fuzzed_gateway: tuple[str, str], mode: GenerationMode
) -> None:
    """Valid requests (by the schema) and invalid ones, for every operation."""
    url, key = fuzzed_gateway
    operations = [result.ok() for result in gateway_schema.get_all_operations()]
    assert len(operations) >= 15  # every route is in the schema
    fuzzed = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
        def fuzz(case: Case) -> None:
            check(case, url, key)

        try:
            fuzz()
        except Unsatisfiable:
            # nothing is invalid for it by its schema (only free-form strings), so no
            # negative case exists; a positive one always does
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        fuzzed.append(operation.label)
    if mode is GenerationMode.POSITIVE:
        assert len(fuzzed) == len(operations)
    else:  # every operation that takes a body or a typed query parameter
        assert set(fuzzed) >= WITH_INPUT, fuzzed
