"""A small disk to fill: a tmpfs of a given size mounted for one test (root only: mounting
needs it; the test is skipped, saying so, where the suite does not run as root)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(path: Path, size_bytes: int) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill(disk: Path, leave_bytes: int) -> Path:
    """A file that takes all of ``disk``'s free space but about ``leave_bytes``."""
    filler = disk / "filler"
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with open(filler, "wb") as out:
        left = max(0, free - leave_bytes)
        while left > 0:
            left -= out.write(b"\0" * min(left, 1 << 20))
    return filler
