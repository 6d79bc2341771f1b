"""What the gateway reads of the settings (``GatewayConfig``), taken once in ``create_app``:
body and file sizes, what one tenant may hold, where uploaded files live, its runner pool
and how often usage is flushed. Routes that start jobs still hand the settings on to the
job machinery they call (launch, webhooks, the runner pool).

The defaults are the settings' own (``default``): one source for each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headrace.config.settings import Settings, default


@dataclass(frozen=True)
class GatewayConfig:
    files_dir: Path  # uploads, under the state every replica shares
    max_body_bytes: int = default("max_body_bytes")
    max_file_bytes: int = default("max_file_bytes")
    # what one tenant may hold (0: no cap)
    tenant_max_files: int = default("tenant_max_files")
    tenant_max_file_bytes: int = default("tenant_max_file_bytes")
    tenant_max_open_jobs: int = default("tenant_max_open_jobs")
    job_runners: int = default("job_runners")  # 0: jobs run by `headrace batch runner`
    usage_flush_every_s: float = default("usage_flush_every_s")

    @classmethod
    def of(cls, settings: Settings) -> GatewayConfig:
        return cls(
            files_dir=(settings.shared_dir / "files").resolve(),
            max_body_bytes=settings.max_body_bytes,
            max_file_bytes=settings.max_file_bytes,
            tenant_max_files=settings.tenant_max_files,
            tenant_max_file_bytes=settings.tenant_max_file_bytes,
            tenant_max_open_jobs=settings.tenant_max_open_jobs,
            job_runners=settings.job_runners,
            usage_flush_every_s=settings.usage_flush_every_s,
        )
