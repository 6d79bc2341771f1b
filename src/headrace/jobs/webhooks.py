"""Outbound webhooks: only to hosts the operator allows, signed with the tenant's secret.

- **Where**: a URL whose host resolves to a loopback, private, link-local, multicast,
  reserved or unspecified address is refused unless the host (or a network holding its
  address) is in ``webhook_allowed_hosts``. Checked when the job is created and again right
  before each call (a name may resolve elsewhere by then).
- **Signed**: ``X-Headrace-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">``
  with the tenant's secret: the file ``<webhook_secrets_dir>/<tenant>`` (a mounted secret).
  A tenant without one cannot ask for webhooks. ``verify`` is what a receiver runs.
- **Tried** ``TRIES`` times with backoff; the job's status does not depend on it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from headrace.config.settings import Settings

log = logging.getLogger(__name__)

SIGNATURE = "X-Headrace-Signature"
TRIES = 3
TOLERANCE_S = 300


class WebhookRefused(ValueError):
    """A webhook this deployment will not call (where it goes, or no secret to sign with)."""


def _blocked(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


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


def check_target(url: str, settings: Settings) -> None:
    """Raise WebhookRefused unless ``url`` is http(s) to a host this deployment may call."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused(f"webhook_url must be an http(s) URL with a host, not {url!r}")
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise WebhookRefused(f"webhook host {host!r} does not resolve: {exc}") from exc
    addresses = sorted({str(info[4][0]) for info in infos})
    inside = [a for a in addresses if _blocked(a)]
    if inside and not _allowed(host, addresses, settings.webhook_allowed_hosts):
        raise WebhookRefused(
            f"webhook host {host!r} resolves to {', '.join(inside)} (loopback, private or "
            "link-local); an operator can allow it with webhook_allowed_hosts"
        )


def secret_of(tenant: str, settings: Settings) -> bytes:
    folder = settings.webhook_secrets_dir
    path = folder / tenant if folder is not None else None
    if path is None or "/" in tenant or tenant.startswith(".") or not path.is_file():
        raise WebhookRefused(
            f"tenant {tenant!r} has no webhook secret (a file named after it in "
            "webhook_secrets_dir); webhooks are signed with it"
        )
    return path.read_bytes().strip()


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


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect could point anywhere, past the host check: it counts as a failed try."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def notify(url: str, payload: dict[str, Any], tenant: str, settings: Settings) -> bool:
    """POST ``payload`` as signed JSON to ``url``, tried TRIES times with backoff. False if
    every try failed or the target is refused (the job's status is unaffected)."""
    body = json.dumps(payload).encode()
    try:
        secret = secret_of(tenant, settings)
        check_target(url, settings)
    except WebhookRefused as exc:
        log.warning("webhook %s not sent: %s", url, exc)
        return False
    opener = urllib.request.build_opener(_NoRedirects)
    for attempt in range(TRIES):
        headers = {
            "Content-Type": "application/json",
            SIGNATURE: sign(secret, body, int(time.time())),
        }
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with opener.open(request, timeout=10) as response:
                if 200 <= response.status < 300:
                    return True
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            log.warning("webhook %s: try %d failed: %s", url, attempt + 1, exc)
        time.sleep(0.5 * 2**attempt)
    return False
