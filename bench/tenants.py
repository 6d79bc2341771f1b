"""What the gateway's client side costs as tenants grow (issue 37 item 4): one ``Client`` with
a view per tenant (``Client.for_tenant``, what the gateway does) against a ``Client`` per
tenant (what it did), on the real broker and Redis of the local stack.

Each tenant sends ``--per-tenant`` requests; a responder thread plays the pipeline (it reads
the request topics and writes each request's reply to its reply topic: no model, so what is
measured is the client side alone). Printed per tenant count: reply records parsed per reply
(every ``ReplyListener`` reads the whole shared reply topic), Python memory allocated by the
clients (tracemalloc: before the clients, after every reply), threads, and the wall time.

    ./dev bench-tenants [--tenants 1,10,100,1000] [--per-client 1,10,30] [--per-tenant 2]
"""

from __future__ import annotations

import contextlib
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.producers.client import Client
from headrace.schemas.messages import EmbeddingResult, Reply, Request
from headrace.schemas.topics import Topics
from headrace.transport import open_transport

console = Console()


@dataclass
class Figures:
    design: str
    tenants: int
    replies: int
    parsed: int
    memory_bytes: int
    threads: int
    wall_s: float

    @property
    def parsed_per_reply(self) -> float:
        return self.parsed / self.replies


@contextlib.contextmanager
def responder(settings: Settings) -> Iterator[None]:
    """Answers every request on the online request topics, as the pipeline would."""
    transport = open_transport(settings)
    topics = Topics(settings.topic_prefix)
    reader = transport.reader()
    reader.assign([topics.requests(b, "online") for b in settings.buckets], start="end")
    writer = transport.writer(10)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for records in reader.poll(50).values():
                for record in records:
                    request = Request.model_validate_json(record.value)
                    reply = Reply(
                        request_id=request.request_id,
                        tenant=request.tenant,
                        model=request.model,
                        result=EmbeddingResult(embedding=[1.0, 0.0], token_count=3),
                    )
                    writer.send(request.reply_to, reply.model_dump_json().encode())
            writer.flush()

    thread = threading.Thread(target=run, name="responder", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
        reader.close()
        writer.close()


def measure(design: str, settings: Settings, tenants: int, per_tenant: int) -> Figures:
    """``design``: "views" (one Client, a view per tenant) or "clients" (a Client each)."""
    names = [f"t{i:04d}" for i in range(tenants)]
    # a reply topic of its own: no listener reads another measure's replies
    reply_topic = Topics(settings.topic_prefix).replies(f"{design}-{tenants}")
    threads_before = threading.active_count()
    memory_before = tracemalloc.get_traced_memory()[0]
    began = time.perf_counter()
    if design == "views":
        root = Client(settings, tenant=names[0], reply_topic=reply_topic)
        clients = [root.for_tenant(n) for n in names]
        owners = [root]
    else:
        clients = owners = [Client(settings, tenant=n, reply_topic=reply_topic) for n in names]
    try:
        submissions = [
            s
            for c in clients
            for s in c.submit_many([f"{c.tenant} text {j}" for j in range(per_tenant)])
        ]
        replies = [s.result(120) for s in submissions]
        assert all(r.error is None for r in replies)
        memory = tracemalloc.get_traced_memory()[0] - memory_before
        threads = threading.active_count() - threads_before
        parsed = sum(o.replies_read for o in owners)
        wall = time.perf_counter() - began
    finally:
        for owner in owners:
            owner.close()
    return Figures(design, tenants, len(replies), parsed, memory, threads, wall)


def report(rows: list[Figures]) -> None:
    table = Table(
        "design",
        "tenants",
        "replies",
        "parsed per reply",
        "memory MiB",
        "KiB per tenant",
        "threads",
        "wall s",
        title="the gateway's client side as tenants grow",
    )
    for f in rows:
        table.add_row(
            f.design,
            str(f.tenants),
            str(f.replies),
            f"{f.parsed_per_reply:.1f}",
            f"{f.memory_bytes / 2**20:.1f}",
            f"{f.memory_bytes / 1024 / f.tenants:.1f}",
            str(f.threads),
            f"{f.wall_s:.1f}",
        )
    console.print(table)


def main(
    tenants: str = "1,10,100,1000",
    per_client: str = "1,10,30",
    per_tenant: int = 2,
) -> list[Figures]:
    """``tenants``: tenant counts for one Client with views; ``per_client``: for a Client per
    tenant (each opens a broker consumer and threads: kept small)."""
    settings = Settings(topic_prefix=f"bench-tenants-{uuid.uuid4().hex[:6]}", cache_enabled=False)
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    tracemalloc.start()
    rows: list[Figures] = []
    try:
        Client(settings, tenant="warm").close()  # the topics exist before the responder
        with responder(settings):
            for design, counts in (("views", tenants), ("clients", per_client)):
                for count in (int(c) for c in counts.split(",") if c):
                    rows.append(measure(design, settings, count, per_tenant))
    finally:
        tracemalloc.stop()
        if started:
            stack.down()
    report(rows)
    return rows


if __name__ == "__main__":
    typer.run(main)
