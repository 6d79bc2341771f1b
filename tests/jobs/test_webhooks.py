"""Webhook policy: where a webhook may go, and its signature (no service involved)."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.jobs.webhooks import WebhookRefused, check_target, post, secret_of, sign, verify


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",  # loopback
        "http://localhost/hook",
        "http://10.1.2.3/hook",  # private
        "http://192.168.0.9/hook",
        "http://169.254.169.254/latest/meta-data",  # link-local: cloud metadata
        "http://[::1]/hook",
        "http://0.0.0.0/hook",  # unspecified
        "http://100.64.0.1/hook",  # shared address space (carrier-grade NAT)
        "http://198.18.0.1/hook",  # benchmarking
        "http://[::ffff:10.0.0.1]/hook",  # IPv4-mapped private
        "http://[2002:a00:1::]/hook",  # 6to4 of 10.0.0.1
        "http://[fc00::1]/hook",  # unique local
        "ftp://93.184.216.34/hook",  # not http(s)
        "http:///no-host",
    ],
)
def test_internal_or_odd_targets_are_refused(url: str) -> None:
    with pytest.raises(WebhookRefused):
        check_target(url, Settings())


def test_public_addresses_pass_and_operators_can_allow_internal_ones() -> None:
    check_target("https://93.184.216.34/hook", Settings())  # a public address
    allowed = Settings(webhook_allowed_hosts=["127.0.0.1", "10.1.0.0/16"])
    check_target("http://127.0.0.1:9000/hook", allowed)
    check_target("http://10.1.2.3/hook", allowed)
    with pytest.raises(WebhookRefused):
        check_target("http://10.2.0.1/hook", allowed)  # outside the listed network


def test_signatures_verify_and_reject_tampering_and_old_ones() -> None:
    secret, body = b"s3cret", b'{"id": "batch_1", "status": "completed"}'
    header = sign(secret, body, at=1_800_000_000)
    assert verify(secret, header, body, now=1_800_000_010)
    assert not verify(secret, header, body.replace(b"completed", b"failed"), now=1_800_000_010)
    assert not verify(b"other", header, body, now=1_800_000_010)
    assert not verify(secret, header, body, now=1_800_000_000 + 301)  # replayed later
    assert not verify(secret, "garbage", body)


def test_a_tenant_needs_its_own_secret_file(tmp_path: Path) -> None:
    (tmp_path / "acme").write_text("acme-secret\n")
    settings = Settings(webhook_secrets_dir=tmp_path)
    assert secret_of("acme", settings) == b"acme-secret"
    for tenant in ("globex", "../acme", ".hidden"):
        with pytest.raises(WebhookRefused):
            secret_of(tenant, settings)
    with pytest.raises(WebhookRefused):
        secret_of("acme", Settings())  # no secrets folder: no webhooks


def test_a_refusal_does_not_say_what_the_name_resolved_to() -> None:
    with pytest.raises(WebhookRefused) as refused:
        check_target("http://localhost:8000/hook", Settings())
    assert "127.0.0.1" not in str(refused.value) and "::1" not in str(refused.value)


def test_the_call_goes_to_the_checked_address_with_no_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, bytes]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.headers["Host"], body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.handle_request, daemon=True).start()
    port = server.server_address[1]
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # a proxy would fail the call
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    # a name that resolves nowhere: the connection uses the address given, not a lookup
    status = post(f"http://hooks.invalid:{port}/h?x=1", "127.0.0.1", b"{}", {"X-A": "1"})
    server.server_close()
    assert status == 204
    assert seen == [(f"hooks.invalid:{port}", b"{}")]
