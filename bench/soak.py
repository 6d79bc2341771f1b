"""Soak: mixed traffic for a long while at about 70% of capacity, with a fault every few
minutes; does anything grow without bound, and is every request still answered once?

Two pipelines share the local stack and a broker of their own: embeddings (a dispatcher, two
workers) and generation (the test LM: a dispatcher, one worker). The broker keeps its log in
memory by default; ``--broker-storage s3`` keeps it in the stack's S3 store and adds the
broker's faults (an in-memory broker restarted loses every topic, which is no fault a
deployment has). On this 2-core machine tansu on S3 storage is the bottleneck (SeaweedFS
near one core, a capacity of about 11 req/s that varies run to run), so the default soaks
the pipeline; the broker's storage faults have their rows in the fault suite.

Traffic is open loop: online embeddings and bulk-lane embeddings at ``load`` of the
capacity measured first (split 2:1), generation requests at 2/s (90% max_tokens 16, 10% 64).
A fault every ``fault_every_s``, in turn: kill -9 an embedding worker (restarted), kill -9
the embedding dispatcher (restarted), restart Redis empty, kill -9 the generation worker
(restarted), kill -9 an embedding worker and 2.5 s later the dispatcher (both restarted);
with ``s3`` storage also restart the broker and stop S3 for 10 s.

Every minute: each process's RSS and open files, Redis's keys, each pipeline's topics' sizes.
At the end: those at start and end, and the fault table: per fault, the requests sent in its
window, how many the client got a reply for, how many the reply topics hold once, twice,
never, and the longest stall after it.

    python -m bench.soak [--minutes 30] [--fault-every-s 300] [--load 0.7]
                         [--broker-storage memory|s3]

Not in CI: it takes its whole duration (``./dev bench-soak``).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import redis
import typer
from kafka import KafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.models import tiny_lm
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline, Proc, free_port
from headrace.ops.sample_texts import long_tail_texts
from headrace.producers.client import Client
from headrace.producers.submission import Submission
from headrace.schemas.messages import Reply
from headrace.transport import open_transport

console = Console(width=130)
GENERATION_RATE = 2.0


@dataclass
class Sent:
    at: float
    kind: str
    submission: Submission


@dataclass
class Soak:
    settings: Settings
    stack: LocalStack
    broker: LocalStack
    embed: Pipeline
    generate: Pipeline
    sent: list[Sent] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)
    faults: list[tuple[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def track(self, kind: str, submission: Submission) -> None:
        with self.lock:
            self.sent.append(Sent(time.monotonic(), kind, submission))
        submission.future.add_done_callback(self._arrived)

    def _arrived(self, _: object) -> None:
        with self.lock:
            self.arrivals.append(time.monotonic())

    def processes(self) -> dict[str, Proc]:
        named = {f"embed-{p.name}": p for p in [*self.embed.dispatchers, *self.embed.workers]}
        named |= {f"gen-{p.name}": p for p in [*self.generate.dispatchers, *self.generate.workers]}
        return {n: p for n, p in named.items() if p.alive()}

    def sample(self, prefixes: list[str], bootstrap: str) -> None:
        row: dict[str, float] = {"t": time.monotonic()}
        for name, proc in self.processes().items():
            row[f"{name} rss MB"] = _rss_mb(proc.pid)
            row[f"{name} fds"] = _fds(proc.pid)
        client = redis.Redis.from_url(self.settings.redis_url)
        row["redis keys"] = float(client.dbsize())
        for prefix in prefixes:
            row[f"{prefix} topic records"] = float(_topic_records(prefix, bootstrap))
        self.samples.append(row)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _fds(pid: int) -> float:
    return float(len(os.listdir(f"/proc/{pid}/fd")))


def _topic_records(prefix: str, bootstrap: str) -> int:
    """Records on every topic of ``prefix`` (requests and replies grow with the traffic: by
    design, until retention; the control and dead-letter topics should not)."""
    settings = Settings(topic_prefix=prefix, kafka_bootstrap=bootstrap)
    consumer = KafkaConsumer(**settings.kafka_options())
    try:
        topics = [t for t in consumer.topics() if t.startswith(f"{prefix}.")]
        tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()]
        return sum(consumer.end_offsets(tps).values()) if tps else 0
    finally:
        consumer.close()


def capacity(client: Client, texts: list[str]) -> float:
    """Requests/s the embedding pipeline answers when given everything at once."""
    began = time.perf_counter()
    for s in client.submit_many(texts):
        s.result(300)
    return len(texts) / (time.perf_counter() - began)


def pace(rate: float, stop: threading.Event, send: Callable[[int], None]) -> None:
    """Call ``send(i)`` ``rate`` times a second (open loop) until ``stop``."""
    next_at = time.perf_counter()
    for i in itertools.count():
        if stop.is_set():
            return
        send(i)
        next_at += 1.0 / rate
        time.sleep(max(0.0, next_at - time.perf_counter()))


def faults(soak: Soak) -> list[tuple[str, Callable[[], None]]]:
    stack, embed, gen = soak.stack, soak.embed, soak.generate

    def restart(proc: Proc) -> None:
        proc.kill()
        proc.launch()

    def outage(where: LocalStack, service: str, seconds: float) -> None:
        where.stop_service(service)
        time.sleep(seconds)
        where.up(only=(service,))

    def worker_then_dispatcher() -> None:
        embed.workers[1].kill()
        time.sleep(2.5)
        embed.dispatcher.kill()
        embed.workers[1].launch()
        embed.dispatcher.launch()

    plan = [
        ("kill -9 an embedding worker", lambda: restart(embed.workers[0])),
        ("kill -9 the embedding dispatcher", lambda: restart(embed.dispatcher)),
        ("restart Redis, empty", lambda: outage(stack, "redis", 0.5)),
        ("kill -9 the generation worker", lambda: restart(gen.workers[0])),
        ("kill -9 a worker, 2.5 s later the dispatcher", worker_then_dispatcher),
    ]
    if soak.broker.settings.broker_storage == "s3":
        plan[3:3] = [
            ("restart the broker (log in S3)", lambda: outage(soak.broker, "kafka", 0.5)),
            ("stop S3 for 10 s (the broker's store)", lambda: outage(stack, "s3", 10.0)),
        ]
    return plan


def report(soak: Soak, replies: dict[str, collections.Counter[str]], ended: float) -> None:
    first, last = soak.samples[0], soak.samples[-1]
    table = Table("measure", "start", "end", "change")
    for key in sorted(set(first) & set(last) - {"t"}):
        table.add_row(
            key, f"{first[key]:.1f}", f"{last[key]:.1f}", f"{last[key] - first[key]:+.1f}"
        )
    console.print(f"samples {len(soak.samples)} over {(last['t'] - first['t']) / 60:.1f} min")
    console.print(table)
    edges = [at for _, at in soak.faults] + [ended]
    faults = Table(
        "fault", "at min", "sent", "client got", "on topic once", "twice", "never", "stall s"
    )
    start = soak.sent[0].at if soak.sent else 0.0
    for (name, at), until in zip(soak.faults, edges[1:], strict=True):
        window = [s for s in soak.sent if at <= s.at < until]
        counts = [replies[s.kind][s.submission.request.request_id] for s in window]
        after = sorted(t for t in soak.arrivals if at <= t < until)
        stall = max((b - a for a, b in itertools.pairwise([at, *after])), default=float("nan"))
        faults.add_row(
            name,
            f"{(at - start) / 60:.1f}",
            str(len(window)),
            str(sum(_got(s) for s in window)),
            str(sum(c == 1 for c in counts)),
            str(sum(c > 1 for c in counts)),
            str(sum(c == 0 for c in counts)),
            f"{stall:.1f}",
        )
    console.print(faults)
    all_counts = [replies[s.kind][s.submission.request.request_id] for s in soak.sent]
    console.print(
        f"all {len(all_counts)} requests: the client got {sum(_got(s) for s in soak.sent)}; "
        f"on the reply topics once {sum(c == 1 for c in all_counts)}, "
        f"twice {sum(c > 1 for c in all_counts)}, never {sum(c == 0 for c in all_counts)}"
    )


def main(
    minutes: float = 30.0,
    fault_every_s: float = 300.0,
    load: float = 0.7,
    broker_storage: str = typer.Option("memory", help="memory, or s3 (adds the broker's faults)"),
) -> None:
    if broker_storage not in ("memory", "s3"):
        raise typer.BadParameter(f"--broker-storage is memory or s3, not {broker_storage!r}")
    storage = cast(Literal["memory", "s3"], broker_storage)
    settings = Settings()
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    run = uuid.uuid4().hex[:6]
    bootstrap = f"127.0.0.1:{free_port()}"
    broker = LocalStack(
        Settings(
            kafka_bootstrap=bootstrap,
            broker_storage=storage,
            state_dir=settings.state_dir / "soak" / run,
        )
    )
    broker.up(only=("kafka",))
    embed_prefix, gen_prefix = f"soak-embed-{run}", f"soak-gen-{run}"
    embed_settings = Settings(topic_prefix=embed_prefix, kafka_bootstrap=bootstrap)
    gen_settings = Settings(topic_prefix=gen_prefix, model=tiny_lm.NAME, kafka_bootstrap=bootstrap)
    fast = {
        "HEADRACE_WORKER_HEARTBEAT_S": "0.5",
        "HEADRACE_KAFKA_BOOTSTRAP": bootstrap,
    }
    texts = [t[:300] for t in long_tail_texts(5000, seed=31)]
    stop = threading.Event()
    try:
        with (
            Pipeline(
                env={"HEADRACE_TOPIC_PREFIX": embed_prefix, **fast}, worker_buckets=["all", "all"]
            ) as embed,
            Pipeline(
                env={"HEADRACE_TOPIC_PREFIX": gen_prefix, "HEADRACE_MODEL": tiny_lm.NAME, **fast},
                worker_buckets=["all"],
            ) as generate,
            Client(embed_settings, tenant="online") as online,
            Client(embed_settings, tenant="bulk", lane="bulk") as bulk,
            Client(gen_settings, tenant="chat") as chat,
        ):
            soak = Soak(settings, stack, broker, embed, generate)

            def chat_once(i: int) -> None:
                tokens = 64 if i % 10 == 0 else 16
                soak.track("gen", chat.submit_generation(f"story {i}", max_tokens=tokens))

            def start(rate: float, send: Callable[[int], None]) -> threading.Thread:
                thread = threading.Thread(target=pace, args=(rate, stop, send), daemon=True)
                thread.start()
                return thread

            # generation first: the embedding capacity is what is left beside it
            threads = [start(GENERATION_RATE, chat_once)]
            cap = capacity(online, texts[:600])
            rate = load * cap
            console.print(
                f"embedding capacity beside generation {cap:.0f} req/s; "
                f"online {rate * 2 / 3:.0f}/s, bulk {rate / 3:.0f}/s, "
                f"generation {GENERATION_RATE}/s"
            )
            threads.append(
                start(
                    rate * 2 / 3,
                    lambda i: soak.track("embed", online.submit(texts[i % len(texts)])),
                )
            )
            threads.append(
                start(
                    rate / 3,
                    lambda i: soak.track("embed", bulk.submit(texts[(i * 7) % len(texts)])),
                )
            )
            began = time.monotonic()
            soak.sample([embed_prefix, gen_prefix], bootstrap)
            plan = itertools.cycle(faults(soak))
            next_fault, next_sample = began + fault_every_s, began + 60
            while (now := time.monotonic()) < began + minutes * 60:
                if now >= next_fault:
                    name, inject = next(plan)
                    console.print(f"{(now - began) / 60:5.1f} min: {name}")
                    soak.faults.append((name, now))
                    inject()
                    next_fault += fault_every_s
                if now >= next_sample:
                    soak.sample([embed_prefix, gen_prefix], bootstrap)
                    next_sample += 60
                time.sleep(0.5)
            stop.set()
            for t in threads:
                t.join()
            ended = time.monotonic()
            deadline = time.monotonic() + 300  # answered, or given up on (counted as never)
            for s in soak.sent:
                with contextlib.suppress(TimeoutError):
                    s.submission.future.exception(timeout=max(0.0, deadline - time.monotonic()))
            soak.sample([embed_prefix, gen_prefix], bootstrap)
            replies = {
                "embed": _count(embed_settings, online.reply_topic),
                "gen": _count(gen_settings, chat.reply_topic),
            }
            if bulk.reply_topic != online.reply_topic:
                replies["embed"].update(_count(embed_settings, bulk.reply_topic))
            report(soak, replies, ended)
            out = settings.state_dir / "soak" / f"{run}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"samples": soak.samples, "faults": soak.faults}))
    finally:
        stop.set()
        broker.down()
        if started:
            stack.down()


def _got(sent: Sent) -> bool:
    """The client received a reply for it (a result or a typed error)."""
    future = sent.submission.future
    return future.done() and future.exception() is None


def _count(settings: Settings, topic: str) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for record in open_transport(settings).scan(topic):
        counts[Reply.model_validate_json(record.value).request_id] += 1
    return counts


if __name__ == "__main__":
    typer.run(main)
