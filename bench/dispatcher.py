"""One dispatcher process's own cost per request (issue 35 item 4): records handed to its
core as a poll hands them (500 at a time, the bucket topics interleaved), every request
parsed, counted with the model's tokenizer, admitted and batched, each batch made into its
task's JSON as Celery would send it, and completed at once. No broker, no Redis, no worker:
what is left is what the dispatcher itself spends, the ceiling on requests/s one process can
feed to workers.

Printed: requests/s end to end, and microseconds per request for the whole pass and, timed
apart over the same records, for parsing, for token counting and for the tasks' JSON (the
rest: admission, batching, bookkeeping).

    ./dev bench-dispatcher [--requests 20000] [--poll 500]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from headrace.config.settings import Settings
from headrace.models.registry import model_spec
from headrace.models.tokenizer import count_with, tokenizer_for
from headrace.ops.sample_texts import long_tail_texts
from headrace.schemas.buckets import bucket_for
from headrace.schemas.messages import Completion, Request
from headrace.schemas.params import EmbedParams
from headrace.schemas.topics import Topics
from headrace.transport.base import Partition, Record
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.core import DispatcherCore
from headrace.workers.dispatcher.intake import parse_request
from headrace.workers.dispatcher.io.collector import tune_collector
from headrace.workers.dispatcher.io.metrics import PrometheusObserver
from headrace.workers.tasks import task_args

PARTITIONS = 2


@dataclass
class Figures:
    requests: int
    batches: int
    seconds: float
    parse_us: float
    count_us: float

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds

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
        value = request.model_dump_json().encode()
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


def run(settings: Settings, requests: int, poll: int) -> Figures:
    tune_collector()  # as the dispatcher process does once it has started (the records made
    # below stand for the broker's and are walked by the collector as a poll's would be)
    tokenizer = tokenizer_for(settings.model)
    spec = model_spec(settings.model)
    config = CoreConfig.from_settings(settings, {settings.model: spec.max_tokens}, "bench")
    core = DispatcherCore(
        config,
        time.monotonic,
        observer=PrometheusObserver(),
        count_tokens=lambda texts: count_with(tokenizer, texts),
    )
    seen = ev.WorkersSeen({b: frozenset({"w"}) for b in settings.buckets})
    records = records_of(settings, requests)
    passes = polls(records, poll)
    sent = answered = 0
    busy = 0.0  # seconds spent in the dispatcher's work (not in the waits for due batches)

    def complete(actions: list[ev.Action]) -> None:
        """Each batch sent: its task's JSON made as Celery would, then completed."""
        nonlocal sent, answered
        completions = []
        for action in actions:
            if isinstance(action, ev.SendBatch):
                json.dumps([task_args(action.batch), {}, {}])  # Celery's message body
                refs = [item.ref for item in action.batch.items]
                completions.append(Completion(batch_id=action.batch.batch_id, done=refs))
                sent += 1
                answered += len(refs)
        core.handle(ev.CompletionsRead(completions))

    for polled in passes:
        core.handle(seen)  # heartbeats (the shell's housekeeping): every bucket has a worker
        began = time.perf_counter()
        actions = core.handle(ev.RecordsRead(polled, time.time(), frozenset()))
        complete(actions + core.handle(ev.Tick()))
        busy += time.perf_counter() - began
    deadline = time.monotonic() + 10
    while answered < requests and time.monotonic() < deadline:  # the last open batches
        time.sleep(config.max_wait_ms / 1000)  # once their wait is over
        core.handle(seen)
        began = time.perf_counter()
        complete(core.handle(ev.Tick()))
        busy += time.perf_counter() - began
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


def _per_request(requests: int, work: Callable[[], object]) -> float:
    """Microseconds per request that ``work`` takes."""
    began = time.perf_counter()
    work()
    return (time.perf_counter() - began) / requests * 1e6


def main(argv: list[str] | None = None) -> Figures:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--poll", type=int, default=500)
    args = parser.parse_args(argv)
    settings = Settings()
    figures = run(settings, args.requests, args.poll)
    rest = figures.total_us - figures.parse_us - figures.count_us
    print(
        f"dispatcher core, {figures.requests} requests in {figures.batches} batches "
        f"(polls of {args.poll}, model {settings.model}):\n"
        f"  {figures.per_s:,.0f} requests/s; {figures.total_us:.1f} us a request: "
        f"parse {figures.parse_us:.1f}, count {figures.count_us:.1f}, the rest {rest:.1f} "
        f"(admit, batch, the task's JSON, completions)"
    )
    return figures


if __name__ == "__main__":
    main()
