"""The tenants bench on the real broker and Redis: with one Client and a view per tenant each
reply is parsed once; with a Client per tenant, about once per tenant (what the gateway
did)."""

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
    # every listener reads the shared reply topic: about once per tenant (a listener whose
    # position resolves late misses the first replies of the others: up to 4, not exactly)
    assert 2.0 < rows["clients", 4].parsed_per_reply <= 4.0
    assert rows["clients", 4].threads > rows["views", 4].threads
    assert "client side as tenants grow" in capsys.readouterr().out
