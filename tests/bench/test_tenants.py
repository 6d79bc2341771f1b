"""The tenants bench on the real broker and Redis: with one Client and a view per tenant each
reply is parsed once; with a Client per tenant, once per tenant (what the gateway did)."""

from __future__ import annotations

import pytest

from bench.tenants import main
from headrace.ops.localstack import LocalStack

pytestmark = pytest.mark.timeout(300)


def test_views_parse_each_reply_once_and_clients_once_per_tenant(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = {(f.design, f.tenants): f for f in main(tenants="1,4", per_client="4", per_tenant=2)}
    assert {key: f.replies for key, f in rows.items()} == {
        ("views", 1): 2,
        ("views", 4): 8,
        ("clients", 4): 8,
    }
    assert rows["views", 1].parsed_per_reply == rows["views", 4].parsed_per_reply == 1.0
    assert rows["clients", 4].parsed_per_reply == 4.0
    assert rows["clients", 4].threads > rows["views", 4].threads
    assert "client side as tenants grow" in capsys.readouterr().out
