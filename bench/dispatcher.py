"""One dispatcher process's own cost per request (issue 35 item 4): records handed to its
core as a poll hands them (500 at a time, the bucket topics interleaved), every request
parsed, counted with the model's tokenizer, admitted and batched, each batch made into its
task's JSON as Celery would send it, and completed at once. No broker, no Redis, no worker:
what is left is what the dispatcher itself spends, the ceiling on requests/s one process can
feed to workers.

Printed: requests/s end to end, and microseconds per request for the whole pass and, timed
apart over the same records, for parsing, for token counting and for the tasks' JSON (the
rest: admission, batching, bookkeeping).

With ``--stack``, the same again through the real services (the local stack, started if it
is not running): the records produced to the bucket topics first, then read by the
transport's reader as the dispatcher's is (polls of ``--poll``, commits), and each batch sent
through Celery to its queue on Redis (then completed at once; the queues are deleted after).
Printed: requests/s the loop sustains from a backlog, and CPU microseconds a request (every
thread of this process: kafka-python's IO thread too), and the loop's thread's split into
the reader's polls, the core, the Celery sends and the commits.

With ``--batch-tokens`` and ``--overhead-tokens``, batches of another shape than the
settings' (``max_batch_tokens``, ``batch_overhead_tokens``): a GPU worker's batches are far
larger than a CPU's (docs/configuration.md#on-a-gpu), and what the dispatcher spends on a
batch (its task's JSON, the Celery send) is shared by more requests.

    ./dev bench-dispatcher [--requests 20000] [--poll 500] [--stack]
        [--batch-tokens N] [--overhead-tokens N]
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from headrace.config.settings import Settings
from headrace.connections import redis_client
from headrace.models.registry import model_spec
from headrace.models.tokenizer import count_with, tokenizer_for
from headrace.ops.localstack import LocalStack
from headrace.ops.sample_texts import long_tail_texts
from headrace.schemas.buckets import bucket_for
from headrace.schemas.messages import Completion, Request
from headrace.schemas.params import EmbedParams
from headrace.schemas.topics import Topics
from headrace.schemas.wire import request_body
from headrace.transport import open_transport
from headrace.transport.base import Partition, Record
from headrace.workers import task_body
from headrace.workers.collector import tune_collector
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.core import DispatcherCore
from headrace.workers.dispatcher.intake import parse_request
from headrace.workers.dispatcher.io.metrics import PrometheusObserver
from headrace.workers.tasks import batch_sender, task_args

PARTITIONS = 2
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}  # Celery's


@dataclass
class Rate:
    requests: int
    batches: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds


@dataclass
class Figures(Rate):
    parse_us: float
    count_us: float

    @property
    def total_us(self) -> float:
        return self.seconds / self.requests * 1e6


def records_of(settings: Settings, count: int) -> list[Record]:
    """``count`` requests of the long-tail texts as the SDK produces them, each on the topic
    of its bucket and one of its partitions, interleaved."""
    topics = Topics(settings.topic_prefix)
    texts = long_tail_texts(count, seed=11, model=settings.model)
    counts = count_with(tokenizer_for(settings.model), texts)
    offsets: dict[Partition, int] = defaultdict(int)
    out = []
    for i, (text, tokens) in enumerate(zip(texts, counts, strict=True)):
        request = Request(
            request_id=f"r{i}",
            tenant="bench",
            model=settings.model,
            input=text,
            params=EmbedParams(),
            reply_to=topics.replies("bench"),
            token_count=tokens,
        )
        tp = (topics.requests(bucket_for(tokens, settings.buckets)), i % PARTITIONS)
        value = request_body(request)  # as the SDK produces it
        out.append(Record(tp[0], tp[1], offsets[tp], request.request_id.encode(), value, ()))
        offsets[tp] += 1
    return out


def polls(records: list[Record], size: int) -> list[dict[Partition, list[Record]]]:
    out = []
    for start in range(0, len(records), size):
        polled: dict[Partition, list[Record]] = defaultdict(list)
        for record in records[start : start + size]:
            polled[record.tp].append(record)
        out.append(dict(polled))
    return out


@dataclass
class StackFigures(Rate):  # seconds: wall, from the first poll to the last completion
    cpu_seconds: float  # this process's, every thread
    queues: frozenset[str]  # the Celery queues its batches went to (deleted after)
    # the loop's thread's CPU seconds in each part: the reader's polls, the Celery sends,
    # the commits; the rest of its CPU is the core's
    poll_cpu_s: float = 0.0
    send_cpu_s: float = 0.0
    commit_cpu_s: float = 0.0
    loop_cpu_s: float = 0.0  # the loop's thread, all of it

    @property
    def cpu_us(self) -> float:
        return self.us(self.cpu_seconds)

    def us(self, seconds: float) -> float:
        """``seconds`` of CPU as microseconds a request."""
        return seconds / self.requests * 1e6

    @property
    def core_cpu_s(self) -> float:
        return self.loop_cpu_s - self.poll_cpu_s - self.send_cpu_s - self.commit_cpu_s


class Rig:
    """A dispatcher core as the shell drives it, whose batches leave through ``send`` and are
    completed at once (every bucket has a live worker)."""

    def __init__(self, settings: Settings, send: Callable[[ev.SendBatch], object]) -> None:
        self.tokenizer = tokenizer_for(settings.model)
        spec = model_spec(settings.model)
        self.config = CoreConfig.from_settings(settings, {settings.model: spec.max_tokens}, "b")
        self.core = DispatcherCore(
            self.config,
            time.monotonic,
            observer=PrometheusObserver(),
            count_tokens=lambda texts: count_with(self.tokenizer, texts),
        )
        self.seen = ev.WorkersSeen({b: frozenset({"w"}) for b in settings.buckets})
        self.send = send
        self.sent = self.answered = 0

    def read(self, polled: dict[Partition, list[Record]]) -> list[ev.Action]:
        """A poll's records handed to the core, then a tick; its batches sent and completed."""
        self.core.handle(self.seen)  # heartbeats (the shell's housekeeping)
        actions = self.core.handle(ev.RecordsRead(polled, time.time(), frozenset()))
        return self.complete(actions + self.core.handle(ev.Tick()))

    def tick(self) -> list[ev.Action]:
        self.core.handle(self.seen)
        return self.complete(self.core.handle(ev.Tick()))

    def complete(self, actions: list[ev.Action]) -> list[ev.Action]:
        completions = []
        for action in actions:
            if isinstance(action, ev.SendBatch):
                self.send(action)
                refs = [item.ref for item in action.batch.items]
                completions.append(Completion(batch_id=action.batch.batch_id, done=refs))
                self.sent += 1
                self.answered += len(refs)
        return actions + self.core.handle(ev.CompletionsRead(completions))


def run(settings: Settings, requests: int, poll: int) -> Figures:
    tune_collector()  # as the dispatcher process does once it has started (the records made
    # below stand for the broker's and are walked by the collector as a poll's would be)
    # each batch's task made as Celery's message body (task_body's frame), not sent
    rig = Rig(settings, lambda action: task_body.encode((task_args(action.batch), {}, EMBED)))
    config, tokenizer = rig.config, rig.tokenizer
    records = records_of(settings, requests)
    busy = 0.0  # seconds spent in the dispatcher's work (not in the waits for due batches)
    for polled in polls(records, poll):
        began = time.perf_counter()
        rig.read(polled)
        busy += time.perf_counter() - began
    deadline = time.monotonic() + 10
    while rig.answered < requests and time.monotonic() < deadline:  # the last open batches
        time.sleep(config.max_wait_ms / 1000)  # once their wait is over
        began = time.perf_counter()
        rig.tick()
        busy += time.perf_counter() - began
    sent, answered = rig.sent, rig.answered
    limit = config.max_request_bytes
    parsed = [parse_request(r.value, limit) for r in records]
    inputs = [p.input for p in parsed if isinstance(p, Request)]
    return Figures(
        requests=answered,
        batches=sent,
        seconds=busy,
        parse_us=_per_request(
            len(records),
            lambda: [parse_request(r.value, config.max_request_bytes) for r in records],
        ),
        count_us=_per_request(
            len(records),
            lambda: [
                count_with(tokenizer, inputs[i : i + poll]) for i in range(0, len(inputs), poll)
            ],
        ),
    )


def run_stack(settings: Settings, requests: int, poll: int) -> StackFigures:
    """The pass through the real services: records produced first (a backlog), read by the
    transport's reader, batches sent through Celery to Redis, offsets committed."""
    tune_collector()
    settings = settings.model_copy(update={"topic_prefix": f"bench-disp-{uuid.uuid4().hex[:6]}"})
    records = records_of(settings, requests)
    topics = sorted({r.topic for r in records})
    transport = open_transport(settings)
    transport.ensure_topics(topics, partitions=PARTITIONS)
    writer = transport.writer(60.0)
    for record in records:
        writer.send(record.topic, record.value, record.key)
    writer.flush()
    writer.close()
    celery_send = batch_sender(settings, lambda: True)  # framed: the workers read it
    queues: set[str] = set()
    parts = {"poll": 0.0, "send": 0.0, "commit": 0.0}  # the loop's thread's CPU seconds

    def send(action: ev.SendBatch) -> None:
        began = time.thread_time()
        celery_send(action.batch, action.queue)
        queues.add(action.queue)
        parts["send"] += time.thread_time() - began

    rig = Rig(settings, send)
    reader = transport.reader(f"{settings.topic_prefix}.dispatcher", max_poll_records=poll)
    reader.assign(topics, start="beginning")
    try:
        began, cpu, loop = time.perf_counter(), time.process_time(), time.thread_time()
        deadline = time.monotonic() + 120
        while rig.answered < requests and time.monotonic() < deadline:
            polling = time.thread_time()
            polled = reader.poll(rig.core.poll_timeout_ms())
            parts["poll"] += time.thread_time() - polling
            actions = rig.read(polled) if polled else rig.tick()
            for action in actions:
                if isinstance(action, ev.Commit):
                    committing = time.thread_time()
                    reader.commit(action.offsets, sync=action.sync)
                    parts["commit"] += time.thread_time() - committing
        seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu
        loop_cpu_s = time.thread_time() - loop
    finally:
        reader.close()
        transport.close()
        if queues:
            redis_client(settings).delete(*queues)
    return StackFigures(
        rig.answered,
        rig.sent,
        seconds,
        cpu_seconds,
        frozenset(queues),
        poll_cpu_s=parts["poll"],
        send_cpu_s=parts["send"],
        commit_cpu_s=parts["commit"],
        loop_cpu_s=loop_cpu_s,
    )


def _per_request(requests: int, work: Callable[[], object]) -> float:
    """Microseconds per request that ``work`` takes."""
    began = time.perf_counter()
    work()
    return (time.perf_counter() - began) / requests * 1e6


def main(argv: list[str] | None = None) -> Figures | StackFigures:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--poll", type=int, default=500)
    parser.add_argument("--stack", action="store_true", help="through Kafka, Celery and Redis")
    parser.add_argument("--batch-tokens", type=int, help="max_batch_tokens (the settings')")
    parser.add_argument("--overhead-tokens", type=int, help="batch_overhead_tokens (the settings')")
    args = parser.parse_args(argv)
    settings = Settings()
    shape = {"max_batch_tokens": args.batch_tokens, "batch_overhead_tokens": args.overhead_tokens}
    settings = settings.model_copy(update={k: v for k, v in shape.items() if v is not None})
    batching = f"batches of at most {settings.max_batch_tokens:,} padded tokens"
    if args.stack:
        with LocalStack(settings).while_needed():
            through = run_stack(settings, args.requests, args.poll)
        us = through.us
        print(
            f"dispatcher through the stack, {through.requests} requests in {through.batches} "
            f"batches ({batching}, polls of {args.poll}, model {settings.model}):\n"
            f"  {through.per_s:,.0f} requests/s from a backlog; {through.cpu_us:.1f} us of CPU a "
            f"request (read from Kafka, the core, sent by Celery, committed)\n"
            f"  the loop's thread, us of CPU a request: polls {us(through.poll_cpu_s):.1f}, "
            f"the core {us(through.core_cpu_s):.1f}, Celery sends {us(through.send_cpu_s):.1f}, "
            f"commits {us(through.commit_cpu_s):.1f}; other threads "
            f"{us(through.cpu_seconds - through.loop_cpu_s):.1f}"
        )
        return through
    figures = run(settings, args.requests, args.poll)
    rest = figures.total_us - figures.parse_us - figures.count_us
    print(
        f"dispatcher core, {figures.requests} requests in {figures.batches} batches "
        f"({batching}, polls of {args.poll}, model {settings.model}):\n"
        f"  {figures.per_s:,.0f} requests/s; {figures.total_us:.1f} us a request: "
        f"parse {figures.parse_us:.1f}, count {figures.count_us:.1f}, the rest {rest:.1f} "
        f"(admit, batch, the task's JSON, completions)"
    )
    return figures


if __name__ == "__main__":
    main()
