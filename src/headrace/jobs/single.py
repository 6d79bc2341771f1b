"""Single asynchronous jobs (``POST /v1/jobs``): one request, submitted now, collected later,
with an optional webhook on completion. A single job is a one-line bulk job (the same store,
runner, resume and cancel); this module gives it its own view and its webhook."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from headrace.jobs.store import Job

log = logging.getLogger(__name__)

KIND = "job"
WEBHOOK_TRIES = 3


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


def notify(url: str, payload: dict[str, Any], timeout_s: float = 10) -> bool:
    """POST ``payload`` as JSON to ``url``; tried WEBHOOK_TRIES times with backoff. False
    if every try failed (the job's status is unaffected: the webhook is a courtesy)."""
    data = json.dumps(payload).encode()
    for attempt in range(WEBHOOK_TRIES):
        request = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                if 200 <= response.status < 300:
                    return True
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            log.warning("webhook %s: try %d failed: %s", url, attempt + 1, exc)
        time.sleep(0.5 * 2**attempt)
    return False
