"""Single asynchronous jobs (``POST /v1/jobs``): one request, submitted now, collected later,
with an optional webhook on completion (``webhooks``). A single job is a one-line bulk job
(the same store, runner, resume and cancel); this module gives it its own view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from headrace.jobs.tables import Job

KIND = "job"


def job_object(job: Job) -> dict[str, Any]:
    """What ``GET /v1/jobs/{id}`` and the webhook carry: status, and once answered the
    response body (status_code + OpenAI embeddings body) or the error."""
    out: dict[str, Any] = {
        "id": job.id,
        "object": "job",
        "status": job.status,
        "created_at": int(job.created_at.timestamp()),
        "completed_at": int(job.completed_at.timestamp()) if job.completed_at else None,
        "metadata": {k: v for k, v in job.metadata_.items() if k not in ("kind", "webhook_url")},
        "response": None,
        "error": None,
    }
    for name in ("output.jsonl", "errors.jsonl"):
        path = Path(job.spool_dir) / name
        if path.exists() and path.stat().st_size:
            line = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
            out["response"], out["error"] = line["response"], line["error"]
            break
    return out
