"""A dispatcher whose loop stops in one pass for good (a client call that never returns: the
hang seen in shared/evidence/generation-hang-2026-12-04 stopped the loop for a minute at a
time) while requests are in flight. Its loop watch ends it once the pass has run
dispatcher_stall_exit_s (code 87, every thread's stack in its log); a fresh dispatcher, as a
supervisor would start, takes the partitions and every request is answered once."""

from __future__ import annotations

import time

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline, Proc
from headrace.producers.client import Client
from headrace.workers.stall_watch import STALL_EXIT_CODE
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.faults.harness import answered_once_after_replacement

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STALL = "<<dispatcher-stall>>"
MARKER = "HEADRACE_FAULT_DISPATCHER_STALL_MARKER"
EXIT_S = 4.0


def test_a_dispatcher_whose_loop_hangs_exits_and_a_fresh_one_answers_everything_once(
    stack: LocalStack,
) -> None:
    prefix = unique_prefix("dstall")
    settings = Settings(topic_prefix=prefix)
    env = pipeline_env(prefix, **{MARKER: STALL, "HEADRACE_DISPATCHER_STALL_EXIT_S": str(EXIT_S)})
    with (
        Pipeline(env=env) as pipeline,
        Client(settings, tenant="dstall") as client,
    ):
        before = client.submit_many([f"answered before the stall {i}" for i in range(10)])
        for s in before:
            s.result(60)
        texts = [f"sent with the stall {i}" for i in range(20)] + [f"the stalling one {STALL}"]
        submissions = before + client.submit_many(texts)
        stalled = pipeline.dispatcher
        eventually(lambda: stalled.exit_code() is not None, 60, "the stalled dispatcher's exit")
        exited_at = time.monotonic()
        # the fault landed with requests in flight: the stalling request unanswered, and the
        # dispatcher ended itself with the watch's code, saying where every thread stood
        assert stalled.exit_code() == STALL_EXIT_CODE, stalled.log_path.read_text()[-3000:]
        assert not submissions[-1].future.done()
        held = sum(not s.future.done() for s in submissions)
        log = stalled.log_path.read_text()
        assert "injected stall" in log and "dispatcher_stall_exit_s" in log and "stall_on" in log
        print(f"stalled dispatcher exited with {held} of {len(submissions)} requests unanswered")

        fresh_env = {k: v for k, v in pipeline.env.items() if k != MARKER}
        fresh = Proc("dispatcher-fresh", ["dispatcher"], fresh_env, pipeline.log_dir)
        pipeline.dispatchers.append(fresh)  # stopped with the pipeline
        fresh.start()
        ready_s, answered_s = answered_once_after_replacement(
            pipeline,
            client,
            submissions,
            f"dispatcher loop hangs (exit after {EXIT_S:g}s; s: after a new one)",
            exited_at,
            tenant="dstall",
        )
    print(
        f"a fresh dispatcher ready {ready_s:.1f}s after the stalled one exited; "
        f"all answered {answered_s:.2f}s after it was ready"
    )
