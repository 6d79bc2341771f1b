"""Model versions, measured (seed F5: version switch time, A/B traffic deviation): every
figure in one run on the local stack, with a registered copy of MiniLM (v1) and a TEST
VERSION of it with perturbed weights (v2), one worker each, one dispatcher.

- loading: load weights / build / warm-up seconds per stage for MiniLM (built in, and
  registered: its load stage checks every file's sha256) and the test LM;
- split deviation: 10% to v2 by request, over ``--requests`` requests through the pipeline
  (and the same assignment alone, without a pipeline);
- switch time: a steady stream of requests, v2 promoted mid-stream: how long after the
  promote the last request went to v1, and the last reply from v1 came;
- canary rollback: a canary at 50%, healthy, then 30% of requests poisoned for v2: time from
  the first poisoned request to the judge's rollback.

    python -m bench.models [--requests 10000] [--rate 100]
"""

from __future__ import annotations

import collections
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.models import rollout
from headrace.models.catalog import ModelCatalog
from headrace.models.register import register
from headrace.models.registry import model_spec
from headrace.models.tiny_lm import NAME as TEST_LM
from headrace.models.traffic import CanaryRules, TrafficPolicy, assign
from headrace.models.variants import label_of, perturbed_copy
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.producers.submission import Submission
from headrace.schemas.messages import Reply
from headrace.workers.backends.base import default_shapes
from headrace.workers.loading import Loader

console = Console(width=120)
MINILM = "all-MiniLM-L6-v2"
POISON = "POISON-FOR-V2"


def stage_seconds(settings: Settings, registered: str) -> Table:
    """Each loading stage of each model, in this process (four buckets, default shapes),
    after one load that is not counted (it pays for importing transformers)."""
    Loader(Settings(model=TEST_LM), worker_id="bench").load(default_shapes([16]))
    table = Table("model", "load weights s", "build s", "warm-up s", "note")
    cases = [
        (Settings(model=MINILM), "built in (pip checked its files at install)"),
        (settings.model_copy(update={"model": registered}), "registered: sha256 of each file"),
        (Settings(model=TEST_LM), "TEST MODEL, random weights"),
    ]
    for case, note in cases:
        loader = Loader(case, worker_id="bench")
        backend = loader.load(default_shapes([16, 64, 128, 256]))
        t = backend.timings
        stages = loader.seconds
        table.add_row(
            loader.spec.ref,
            f"{stages['load_weights']:.2f} ({t.load_weights_s:.2f} reading)",
            f"{stages['build']:.2f}",
            f"{stages['warm_up']:.2f}",
            note,
        )
    return table


class Stream:
    """Requests at a steady rate on a thread; when each was sent and answered."""

    def __init__(self, client: Client, rate: float, text: Callable[[int], str] = str) -> None:
        self.client, self.rate, self.text = client, rate, text
        self.sent: list[tuple[float, Submission]] = []
        self.answered: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Stream:
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, float, Reply]]:
        """(sent, answered, reply) of every request, in the order sent."""
        self._stop.set()
        self._thread.join()
        replies = [(at, submission.result(120)) for at, submission in self.sent]
        return [(at, self.answered[i], reply) for i, (at, reply) in enumerate(replies)]

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            i = len(self.sent)
            submission = self.client.submit(f"request {i}: {self.text(i)}")
            self.sent.append((time.monotonic(), submission))
            submission.future.add_done_callback(
                lambda _, i=i: self.answered.__setitem__(i, time.monotonic())  # type: ignore[misc]
            )
            next_at += 1 / self.rate
            time.sleep(max(0.0, next_at - time.monotonic()))


def reset(catalog: ModelCatalog, model: str) -> None:
    rollout.change(
        catalog, model, lambda p: TrafficPolicy(stable="v1"), action="reset", actor="bench"
    )
    time.sleep(1.5)


def main(requests: int = 10_000, rate: float = 100.0) -> None:
    root = Path(tempfile.mkdtemp(prefix="headrace-bench-models-"))
    prefix = f"bench-models-{uuid.uuid4().hex[:6]}"
    model = "bench-enc"
    env = {
        "HEADRACE_TOPIC_PREFIX": prefix,
        "HEADRACE_MODEL": model,
        "HEADRACE_SQL_URL": f"sqlite:///{root}/registry.db",
        "HEADRACE_STATE_DIR": str(root / "state"),
        "HEADRACE_BREAKER_MIN_REQUESTS": "100000",  # the canary's failures are the judge's
    }
    settings = Settings(
        topic_prefix=prefix, model=model, sql_url=env["HEADRACE_SQL_URL"], state_dir=root / "state"
    )
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    try:
        original = root / "v1"
        import shutil

        shutil.copytree(model_spec(MINILM).path, original)
        register(settings, model, str(original), "v1")
        register(
            settings,
            model,
            str(perturbed_copy(original, root / "v2")),
            "v2",
            label=label_of(0.02, 0),
        )
        catalog = ModelCatalog.for_writing(settings.sql_url)
        console.print(stage_seconds(settings, model))
        pipeline = Pipeline(env=env, worker_buckets=[], log_dir=root / "logs")
        pipeline.add_worker(env={"HEADRACE_MODEL_VERSION": "v1", "HEADRACE_TORCH_THREADS": "1"})
        pipeline.add_worker(
            env={
                "HEADRACE_MODEL_VERSION": "v2",
                "HEADRACE_TORCH_THREADS": "1",
                "HEADRACE_FAULT_POISON_MARKER": POISON,
            }
        )
        with pipeline, Client(settings, tenant="bench") as client:
            client.embed(["warm the connections"])
            split_figures(client, catalog, model, requests)
            switch_figures(client, catalog, model, rate)
            canary_figures(client, catalog, model, rate)
    finally:
        if started:
            stack.down()


def split_figures(client: Client, catalog: ModelCatalog, model: str, requests: int) -> None:
    reset(catalog, model)
    rollout.change(catalog, model, lambda p: rollout.split(p, "v2", 10, "request"), action="deploy")
    time.sleep(1.5)
    began = time.monotonic()
    submissions = []
    for i in range(0, requests, 100):
        submissions += client.submit_many(
            [f"split request {j}" for j in range(i, min(i + 100, requests))]
        )
    replies = [s.result(600) for s in submissions]
    took = time.monotonic() - began
    counts = collections.Counter(r.model_version for r in replies)
    share = counts["v2"] / len(replies)
    policy, _ = catalog.policy(model)
    assert policy is not None
    alone = collections.Counter(assign(policy, "bench", s.request.request_id) for s in submissions)
    console.print(
        f"split 10% to v2 over {len(replies):,} requests ({len(replies) / took:,.0f} req/s): "
        f"v2 served {counts['v2']:,} = {share:.2%}, deviation {abs(share - 0.10) * 100:.2f} "
        f"points (the assignment alone: {alone['v2'] / len(submissions):.2%}); "
        f"errors {sum(r.error is not None for r in replies)}"
    )


def switch_figures(client: Client, catalog: ModelCatalog, model: str, rate: float) -> None:
    reset(catalog, model)
    stream = Stream(client, rate).start()
    time.sleep(3.0)
    promoted_at = time.monotonic()
    rollout.change(
        catalog, model, lambda p: rollout.promote(p, "v2"), action="promote", actor="bench"
    )
    time.sleep(5.0)
    done = stream.stop()
    old = [(s, a) for s, a, r in done if r.model_version == "v1" and s >= promoted_at]
    last_sent = max((s for s, _ in old), default=promoted_at) - promoted_at
    last_reply = max((a for _, a, r in done if r.model_version == "v1"), default=promoted_at)
    after = [r for s, _, r in done if s >= promoted_at + last_sent + 1e-9]
    console.print(
        f"switch v1 -> v2 at {rate:g} req/s: the last request sent to v1 left "
        f"{last_sent:.2f}s after the promote; the last v1 reply came "
        f"{last_reply - promoted_at:.2f}s after; {sum(r.model_version == 'v2' for r in after)}"
        f"/{len(after)} replies after that from v2; {len(done)} requests, "
        f"{sum(r.error is not None for _, _, r in done)} errors"
    )


def canary_figures(client: Client, catalog: ModelCatalog, model: str, rate: float) -> None:
    reset(catalog, model)
    rules = CanaryRules(steps=(0.5,), step_s=600, window_s=10, min_requests=10)
    _, revision = rollout.change(
        catalog, model, lambda p: rollout.canary(p, "v2", rules), action="deploy", actor="bench"
    )
    time.sleep(1.5)
    burst = threading.Event()

    def text(i: int) -> str:
        return POISON if burst.is_set() and i % 10 < 3 else "a canary request"

    stream = Stream(client, rate, text).start()
    time.sleep(5.0)
    healthy, _ = catalog.policy(model)
    burst_at = time.monotonic()
    burst.set()
    rolled_back = None
    while time.monotonic() - burst_at < 60:
        policy, _ = catalog.policy(model)
        if policy is not None and policy.canary is None:
            rolled_back = time.monotonic() - burst_at
            break
        time.sleep(0.05)
    stream.stop()
    judged = [e for e in catalog.events(model, 5) if e.revision == revision + 1]
    when = f"{rolled_back:.2f}s after the burst began" if rolled_back else "NOT within 60 s"
    by = f" by {judged[0].actor}: {judged[0].detail.get('reason')}" if judged else ""
    state = "still running" if healthy and healthy.canary else "gone"
    console.print(
        f"canary at 50% ({state} after 5 s healthy); 30% of requests poisoned for v2 from "
        f"then: rolled back {when}{by}"
    )


if __name__ == "__main__":
    typer.run(main)
