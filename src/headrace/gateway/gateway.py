"""The HTTP gateway (``headrace gateway``): an OpenAI-compatible face on the pipeline.

Routes, each in a module of its own: embeddings (``embeddings_api``), completions and chat
(``completions``), models (``models_api``), files (``files_api``), batches (``batches_api``),
and headrace's single asynchronous jobs (``jobs_api``). Bulk and single jobs are carried out
by the gateway's runner pool (``pool``; ``job_runners``). Bearer API keys map to tenants
(the store keeps only their SHA-256); a tenant sees only its own files and batches: anybody
else's are 404. One ``Client`` serves every tenant (``Client.for_tenant``): a reply is
parsed once however many tenants call. Errors come in OpenAI's shape and every response has
an ``x-request-id`` (``api``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from headrace.config.settings import Settings
from headrace.connections import redis_client
from headrace.gateway import api
from headrace.gateway.batches_api import batches_router
from headrace.gateway.completions import completions_router
from headrace.gateway.config import GatewayConfig
from headrace.gateway.embeddings_api import embeddings_router
from headrace.gateway.files_api import files_router
from headrace.gateway.jobs_api import jobs_router
from headrace.gateway.models_api import models_router
from headrace.gateway.scoring_api import scoring_router
from headrace.gateway.usage_api import usage_router
from headrace.jobs.pool import RunnerPool
from headrace.jobs.store import JobStore
from headrace.jobs.usage import flush
from headrace.producers.client import Client
from headrace.producers.config import ClientConfig
from headrace.usage.meter import UsageMeter

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> FastAPI:
    """The gateway's composition root: everything it serves is built here from ``settings``
    (the CLI's ``Settings()`` reads the environment; nothing below reads it again)."""
    config = GatewayConfig.of(settings)
    store = JobStore(settings.sql_url)
    # one Client for the process (one producer, one reply listener, one resender), made at
    # the first call; each tenant gets a view of it (its name, signing key, pending slots)
    shared: list[Client] = []
    shared_lock = threading.Lock()

    meter = UsageMeter(redis_client(settings), settings.topic_prefix)
    stop_flushing = threading.Event()

    def flush_usage() -> None:  # closed minutes of tenant usage: Redis -> the SQL store
        while not stop_flushing.wait(config.usage_flush_every_s):
            try:
                flush(store, meter)
            except Exception:  # Redis or SQL away: the minutes wait in Redis
                log.warning("usage flush failed; trying again later", exc_info=True)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        flusher = threading.Thread(target=flush_usage, name="usage-flush", daemon=True)
        flusher.start()
        # bulk and single jobs: carried out here (0: by `headrace batch runner` processes)
        pool = RunnerPool(store, settings).start() if config.job_runners else None
        yield
        if pool is not None:
            pool.close()
        stop_flushing.set()
        for client in shared:
            client.close()

    app = FastAPI(title="headrace gateway", version="1", lifespan=lifespan)
    app.state.store = store
    api.install(app, config.max_body_bytes, config.max_file_bytes)

    # a tenant at its pending cap is answered 429 at once: a call blocked waiting for a
    # slot would hold a thread of the pool every tenant's calls share
    client_config = ClientConfig.of(settings, on_full="raise")

    def client_for(tenant: str) -> Client:
        with shared_lock:
            if not shared:
                shared.append(Client(settings, tenant=tenant, config=client_config))
        return shared[0].for_tenant(tenant)

    app.include_router(embeddings_router(client_for))
    app.include_router(completions_router(client_for))
    app.include_router(scoring_router(client_for))
    app.include_router(models_router(settings))
    app.include_router(files_router(config, store))
    app.include_router(batches_router(settings, config, store))
    app.include_router(usage_router(store, meter))
    app.include_router(jobs_router(settings, config, store))

    # --- health: scraped and probed without an API key -------------------------------------
    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> JSONResponse:
        try:
            store.revision()  # the job store answers
        except SQLAlchemyError as exc:
            return JSONResponse({"status": "job store unreachable", "detail": str(exc)}, 503)
        return JSONResponse({"status": "ready"})

    return app
