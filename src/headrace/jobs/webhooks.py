"""Outbound webhooks: only to hosts the operator allows, signed with the tenant's secret.

- **Where**: a URL whose host resolves to any address that is not globally routable
  (``is_global`` false: loopback, private, link-local, shared 100.64/10, reserved, ...; an
  IPv6 address carrying an IPv4 one, mapped, 6to4 or Teredo, is judged by that one too) is
  refused unless the host (or a network holding all its addresses) is in
  ``webhook_allowed_hosts``. Checked when the job is created and again right before each
  call, and the call connects to the very address that was checked (a second DNS answer
  cannot send it elsewhere), with no proxy from the environment and no redirects. A refusal
  does not say what the name resolved to.
- **Signed**: ``X-Headrace-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">``
  with the tenant's secret: the file ``<webhook_secrets_dir>/<tenant>`` (a mounted secret).
  A tenant without one cannot ask for webhooks. ``verify`` is what a receiver runs.
- **Tried** ``TRIES`` times with backoff; the job's status does not depend on it.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import socket
import ssl
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from headrace.config.settings import Settings
from headrace.schemas.signing import tenant_key

log = logging.getLogger(__name__)

SIGNATURE = "X-Headrace-Signature"
TRIES = 3
TOLERANCE_S = 300


class WebhookRefused(ValueError):
    """A webhook this deployment will not call (where it goes, or no secret to sign with)."""


def _blocked(address: str) -> bool:
    """Not globally routable, itself or the IPv4 address an IPv6 one carries."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        carried = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
        if any(v4 is not None and not v4.is_global for v4 in carried):
            return True
    return not ip.is_global or ip.is_multicast


def _allowed(host: str, addresses: Sequence[str], allowed: Sequence[str]) -> bool:
    for entry in allowed:
        if entry == host:
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if all(ipaddress.ip_address(a) in network for a in addresses):
            return True
    return False


def check_target(url: str, settings: Settings) -> str:
    """The address to call for ``url`` (the one checked); ``WebhookRefused`` unless ``url``
    is http(s) to a host this deployment may call."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused(f"webhook_url must be an http(s) URL with a host, not {url!r}")
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise WebhookRefused(f"webhook host {host!r} does not resolve") from exc
    addresses = sorted({str(info[4][0]) for info in infos})
    if any(_blocked(a) for a in addresses) and not _allowed(
        host, addresses, settings.webhook_allowed_hosts
    ):
        raise WebhookRefused(
            f"webhook host {host!r} is not a public address; an operator can allow it with "
            "webhook_allowed_hosts"
        )
    return addresses[0]


def secret_of(tenant: str, settings: Settings) -> bytes:
    secret = tenant_key(settings.webhook_secrets_dir, tenant)
    if secret is None:
        raise WebhookRefused(
            f"tenant {tenant!r} has no webhook secret (a file named after it in "
            "webhook_secrets_dir); webhooks are signed with it"
        )
    return secret


def sign(secret: bytes, body: bytes, at: int) -> str:
    digest = hmac.new(secret, f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={digest}"


def verify(secret: bytes, header: str, body: bytes, now: float | None = None) -> bool:
    """What a receiver runs: the signature matches and is at most TOLERANCE_S old."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        at = int(fields["t"])
    except (ValueError, KeyError):
        return False
    if abs((time.time() if now is None else now) - at) > TOLERANCE_S:
        return False
    return hmac.compare_digest(sign(secret, body, at), header)


class _Pinned(http.client.HTTPConnection):
    """Connects to ``address`` (checked), whatever ``host`` resolves to now."""

    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    """Connects to ``address`` (checked); TLS still verifies the certificate for ``host``."""

    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post(url: str, address: str, body: bytes, headers: dict[str, str]) -> int:
    """POST ``body`` to ``url`` over a connection to ``address``; the status (redirects are
    not followed: a 3xx counts as a failure)."""
    parts = urlsplit(url)
    kind = _PinnedTLS if parts.scheme == "https" else _Pinned
    connection = kind(parts.hostname or "", parts.port, address, timeout=10)
    path = parts.path or "/"
    if parts.query:
        path += f"?{parts.query}"
    try:
        connection.request("POST", path, body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def notify(url: str, payload: dict[str, Any], tenant: str, settings: Settings) -> bool:
    """POST ``payload`` as signed JSON to ``url``, tried TRIES times with backoff. False if
    every try failed or the target is refused (the job's status is unaffected)."""
    body = json.dumps(payload).encode()
    try:
        secret = secret_of(tenant, settings)
        address = check_target(url, settings)
    except WebhookRefused as exc:
        log.warning("webhook %s not sent: %s", url, exc)
        return False
    for attempt in range(TRIES):
        headers = {
            "Content-Type": "application/json",
            SIGNATURE: sign(secret, body, int(time.time())),
        }
        try:
            status = post(url, address, body, headers)
            if 200 <= status < 300:
                return True
            log.warning("webhook %s: try %d answered %d", url, attempt + 1, status)
        except (OSError, http.client.HTTPException) as exc:
            log.warning("webhook %s: try %d failed: %s", url, attempt + 1, exc)
        time.sleep(0.5 * 2**attempt)
    return False
