"""A real ``headrace gateway`` process for tests, with an API key per tenant."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from headrace.jobs.store import JobStore
from headrace.schemas.params import Priority
from tests.eventually import eventually


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextlib.contextmanager
def running_gateway(
    extra_env: dict[str, str],
    tmp_path: Path,
    tenants: tuple[str, ...] = ("acme", "globex"),
    started: list[subprocess.Popen[bytes]] | None = None,
    priorities: dict[str, Priority] | None = None,
    name: str = "gateway",
    keys: dict[str, str] | None = None,
) -> Iterator[tuple[str, dict[str, str]]]:
    """(base URL, tenant -> API key) of a gateway on its own port, state dir and SQLite
    (``extra_env`` may name others); its process is appended to ``started`` when given;
    ``priorities``: a tenant's key's class (``api-key create --priority``); ``keys``: keys
    made already (another gateway on the same store), instead of new ones; its log is
    ``<name>.log``."""
    env = {
        **os.environ,
        "HEADRACE_STATE_DIR": str(tmp_path / "state"),
        "HEADRACE_SQL_URL": f"sqlite:///{tmp_path}/gateway.db",
        **extra_env,
    }
    cli = [sys.executable, "-m", "headrace.ops.cli"]
    if keys is None:  # made in the gateway's store here (tests/ops/test_cli_keys.py: the CLI)
        store = JobStore(env["HEADRACE_SQL_URL"])
        keys = {
            tenant: store.add_api_key(tenant, priority=(priorities or {}).get(tenant))
            for tenant in tenants
        }
        store.engine.dispose()
    port = free_port()
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*cli, "gateway", "--port", str(port)], env=env, stdout=log, stderr=log
        )
        if started is not None:
            started.append(proc)
        url = f"http://127.0.0.1:{port}"

        def serving() -> bool:
            try:
                httpx.get(f"{url}/openapi.json", timeout=1)
                return True
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise RuntimeError(log_path.read_text()) from None
                return False

        eventually(serving, 60, "the gateway serving", every_s=0.2)
        try:
            yield url, keys
        finally:
            proc.terminate()
            proc.wait(timeout=10)


FINAL_STATES = ("completed", "failed", "cancelled", "expired")


def finished(batch: dict[str, Any]) -> dict[str, Any] | None:
    """A batch object (JSON), once it is in a final state (for ``eventually``)."""
    return batch if batch["status"] in FINAL_STATES else None


def completed_job(job: dict[str, Any]) -> dict[str, Any] | None:
    """A job object (JSON), once completed; any state a running job cannot be in fails at
    once (for ``eventually``)."""
    if job["status"] == "completed":
        return job
    if job["status"] not in ("validating", "in_progress", "finalizing"):
        raise RuntimeError(f"the job ended {job['status']}: {job}")
    return None
