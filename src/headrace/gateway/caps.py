"""What one tenant may have open at the gateway: jobs not yet ended (``tenant_max_open_jobs``;
files and bytes are checked where files are uploaded, ``files_api``)."""

from __future__ import annotations

from headrace.gateway.api import ApiError
from headrace.jobs.store import JobStore


def check_open_jobs(store: JobStore, cap: int, tenant: str) -> None:
    """429 ``open_jobs_limit_exceeded`` when ``tenant`` has ``cap`` jobs not yet ended
    (``tenant_max_open_jobs``; 0: no cap)."""
    if not cap:
        return
    open_now = store.open_jobs(tenant)
    if open_now >= cap:
        message = (
            f"this tenant has {open_now} jobs not yet ended, its cap (tenant_max_open_jobs); "
            "wait for some to end or cancel them"
        )
        raise ApiError(429, message, "open_jobs_limit_exceeded")
