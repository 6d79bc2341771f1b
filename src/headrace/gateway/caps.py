"""What one tenant may have open at the gateway: jobs not yet ended (``tenant_max_open_jobs``;
files and bytes are checked where files are uploaded, ``files_api``)."""

from __future__ import annotations

from headrace.config.settings import Settings
from headrace.gateway.api import ApiError
from headrace.jobs.store import JobStore


def check_open_jobs(store: JobStore, settings: Settings, tenant: str) -> None:
    """429 ``open_jobs_limit_exceeded`` when ``tenant`` has its cap of jobs not yet ended."""
    cap = settings.tenant_max_open_jobs
    if not cap:
        return
    open_now = store.open_jobs(tenant)
    if open_now >= cap:
        message = (
            f"this tenant has {open_now} jobs not yet ended, its cap (tenant_max_open_jobs); "
            "wait for some to end or cancel them"
        )
        raise ApiError(429, message, "open_jobs_limit_exceeded")
