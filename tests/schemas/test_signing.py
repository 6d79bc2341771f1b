"""Tenant keys: one a line (producers sign with the first, dispatchers accept any, so a key
rotates without a moment where one side refuses the other), and a folder read again when it
changes, no more often than asked (an injected clock)."""

from __future__ import annotations

import os
from pathlib import Path

from headrace.schemas.signing import (
    KeyFolder,
    control_signature,
    signed_by,
    tenant_key,
    tenant_keys,
)
from tests.clock import FakeClock


def sign(key: bytes) -> str:
    return control_signature(key, "cancel", "acme", "r1")


def test_a_key_file_holds_keys_a_line_and_producers_sign_with_the_first(tmp_path: Path) -> None:
    (tmp_path / "acme").write_bytes(b"new-key\n\n  old-key  \n")
    (tmp_path / "not a tenant").write_bytes(b"skipped")
    (tmp_path / "empty").write_bytes(b"\n")
    assert tenant_key(tmp_path, "acme") == b"new-key"
    assert tenant_keys(tmp_path) == {"acme": (b"new-key", b"old-key")}
    keys = tenant_keys(tmp_path)
    assert signed_by(keys, "acme", sign(b"old-key"), sign)  # mid-rotation: both taken
    assert signed_by(keys, "acme", sign(b"new-key"), sign)
    assert not signed_by(keys, "acme", sign(b"another"), sign)
    assert not signed_by(keys, "acme", None, sign)
    assert signed_by(keys, "globex", None, sign)  # no key: served as before


def test_the_folder_is_read_again_when_it_changes_and_no_more_often_than_asked(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    (tmp_path / "acme").write_bytes(b"first\n")
    folder = KeyFolder(tmp_path, every_s=5, clock=clock)
    assert folder.keys == {"acme": (b"first",)}
    clock.now += 10
    assert not folder.refresh()  # nothing changed
    (tmp_path / "acme").write_bytes(b"second\nfirst\n")  # rotation, step one
    (tmp_path / "globex").write_bytes(b"g\n")  # a tenant starts signing
    clock.now += 1
    assert not folder.refresh()  # not due yet
    assert folder.keys == {"acme": (b"first",)}
    clock.now += 5
    assert folder.refresh()
    assert folder.keys == {"acme": (b"second", b"first"), "globex": (b"g",)}
    (tmp_path / "globex").unlink()
    stat = (tmp_path / "acme").stat()
    (tmp_path / "acme").write_bytes(b"third\n")  # same size as before: told by its time
    os.utime(tmp_path / "acme", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    clock.now += 5
    assert folder.refresh()
    assert folder.keys == {"acme": (b"third",)}


def test_no_folder_means_no_keys(tmp_path: Path) -> None:
    folder = KeyFolder(tmp_path / "missing", every_s=0, clock=FakeClock())
    assert folder.keys == {} and not folder.refresh()
    assert KeyFolder(None).keys == {}
