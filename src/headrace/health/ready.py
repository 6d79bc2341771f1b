"""The readiness handshake of a long-running process: one line on stdout,
``READY <kind> <id>``, printed once the process can do its job (a worker after warm-up, a
dispatcher once it holds partitions). Whoever started it (``headrace.ops.processes``) waits
for that line."""

from __future__ import annotations

READY = "READY"


def announce_ready(kind: str, ident: str = "") -> None:
    """Say READY on stdout, and turn this process's ``/readyz`` to 200."""
    from headrace.health.endpoint import mark_ready

    mark_ready()
    print(f"{READY} {kind} {ident}".rstrip(), flush=True)


def is_ready_line(line: bytes | str) -> bool:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    return text.startswith(READY)
