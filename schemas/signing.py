"""Records signed with their tenant's key, so the pipeline itself (not only the broker's ACLs)
knows which tenant wrote them.

A tenant that has a key (``<tenant_keys_dir>/<tenant>``, a mounted secret shared by the
tenant's producers and the dispatchers) signs every request and cancellation it produces:
``signature`` is the hex HMAC-SHA256, with that key: a request's over the whole record as JSON
without its signature (``Request.signable``: input, params, session, cache directive, times,
all of it), a cancellation's over who cancels what. A dispatcher that has the tenant's key
takes only records that carry a valid signature: any other is dead-lettered, never answered
and never claimed (a forger who named a victim's request id and reply topic would otherwise
answer or cancel the victim's request, or with a signature seen on the topic send the same
request id with another input or session). A signed request older than the ledger remembers
answered ids (``answered_ttl_s``) is refused as a replay: within it, the id is answered
once. A tenant without a key is served as before.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from headrace.schemas.tenants import TENANT_PATTERN, check_tenant

_VERSION = "v1"


def _sign(key: bytes, *fields: str) -> str:
    message = "\n".join((_VERSION, *fields)).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def request_signature(key: bytes, unsigned_json: str) -> str:
    """Over the request record as JSON without its signature (``Request.signable``)."""
    return _sign(key, "request/2", unsigned_json)


def control_signature(key: bytes, action: str, tenant: str, request_id: str) -> str:
    return _sign(key, "control", action, tenant, request_id)


def invalidation_signature(key: bytes, unsigned_json: str) -> str:
    """Over the invalidation record as JSON without its signature (``signable``)."""
    return _sign(key, "invalidation", unsigned_json)


def valid(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected, given)


Keys = Mapping[str, Sequence[bytes]]  # tenant -> the keys its signatures may use


def signed_by(
    keys: Keys, tenant: str | None, given: str | None, sign: Callable[[bytes], str]
) -> bool:
    """Whether ``given`` is ``tenant``'s signature (``sign(key)``) with one of its keys
    (two during a rotation); true for a tenant with no key."""
    accepted = keys.get(tenant or "")
    return not accepted or any(valid(sign(key), given) for key in accepted)


def _keys_in(path: Path) -> tuple[bytes, ...]:
    """A key file's keys: one a line, blank lines skipped."""
    return tuple(line.strip() for line in path.read_bytes().splitlines() if line.strip())


def _file_of(folder: Path | None, tenant: str) -> Path | None:
    if folder is None:
        return None
    try:
        path = folder / check_tenant(tenant)
    except ValueError:
        return None
    return path if path.is_file() else None


def tenant_key(folder: Path | None, tenant: str) -> bytes | None:
    """``tenant``'s secret: the first line of the file named after it in ``folder`` (None:
    no such file, or not a valid tenant name). A key file holds one key a line: producers
    sign with the first, dispatchers accept any (a rotation: add the new key as a second
    line, then move it first, then drop the old one)."""
    path = _file_of(folder, tenant)
    keys = _keys_in(path) if path is not None else ()
    return keys[0] if keys else None


def tenant_keys(folder: Path | None) -> dict[str, tuple[bytes, ...]]:
    """Every tenant's accepted keys in ``folder``: a file named after its tenant (others are
    skipped)."""
    if folder is None or not folder.is_dir():
        return {}
    out = {}
    for path in sorted(folder.iterdir()):
        found = _file_of(folder, path.name)
        keys = _keys_in(found) if found is not None else ()
        if keys:
            out[path.name] = keys
    return out


class KeyFolder:
    """The tenant keys of ``folder``, read again when a file in it changed (a key added,
    rotated or removed takes effect without a restart; a mounted k8s secret changes this
    way), looked at no more than every ``every_s``."""

    def __init__(
        self,
        folder: Path | None,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = folder
        self.every_s = every_s
        self.clock = clock
        self._stamp = self._stamp_now()
        self.keys: dict[str, tuple[bytes, ...]] = tenant_keys(folder)
        self._looked = clock()

    def _stamp_now(self) -> tuple[tuple[str, int, int], ...]:
        if self.folder is None or not self.folder.is_dir():
            return ()
        stamps = []
        for path in sorted(self.folder.iterdir()):
            try:
                stat = path.stat()  # a symlink's target: a secret's files are links
            except OSError:
                continue
            stamps.append((path.name, stat.st_mtime_ns, stat.st_size))
        return tuple(stamps)

    def refresh(self) -> bool:
        """Read the folder again if due and changed; whether the keys changed."""
        now = self.clock()
        if now - self._looked < self.every_s:
            return False
        self._looked = now
        stamp = self._stamp_now()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        keys = tenant_keys(self.folder)
        changed = keys != self.keys
        self.keys = keys
        return changed


__all__ = [
    "TENANT_PATTERN",
    "KeyFolder",
    "Keys",
    "control_signature",
    "invalidation_signature",
    "request_signature",
    "signed_by",
    "tenant_key",
    "tenant_keys",
    "valid",
]
