"""The suite on several xdist workers (two by default; ``HEADRACE_TEST_WORKERS=N ./dev test``
for N, 0 for one process), with what the tests share kept safe. On CI's 2 cores two workers
took the test phase from 23:47 to 16:43-18:00 (docs/benchmarks.md): most tests wait on other
processes (a worker loading, a fault's seconds, a broker's group join) as much as they
compute, and the pipelines' processes start forked (``headrace.ops.prefork``). Two
workers used to be slower, when every worker start cost 6-9 s of imports.

- the local stack is started once, by the controller, before any worker runs (each
  worker's ``stack`` fixture then finds it up, and leaves it);
- a module's tests stay on one worker (an ``xdist_group`` per module, unless a test names
  its own group): a module's fixtures, often a whole pipeline, start once;
- a test marked ``exclusive`` stops a service every test uses (Redis restarted empty, S3
  stopped): it runs alone. Every test holds a shared lock for its whole run protocol
  (setup, call, teardown), an exclusive one the lock alone; a turnstile keeps a waiting
  exclusive test from being starved by the other worker's next tests.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack

LOCKS = Path(os.environ.get("HEADRACE_STATE_DIR", ".headrace")) / "test-locks"
STARTED = pytest.StashKey[LocalStack]()  # the stack the controller started, to stop


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def in_parallel(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "exclusive: stops a service every test uses; runs with no other test"
    )
    if in_parallel(config) and not is_worker(config):
        stack = LocalStack(Settings())
        if not stack.is_up():
            stack.up()
            config.stash[STARTED] = stack


def pytest_unconfigure(config: pytest.Config) -> None:
    started = config.stash.get(STARTED, None)
    if started is not None:
        started.down()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@contextmanager
def _locked(path: Path, how: int) -> Generator[None, None, None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, how)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    if not is_worker(item.config):
        yield
        return
    if item.get_closest_marker("exclusive") is not None:
        with _locked(LOCKS / "turnstile", fcntl.LOCK_EX), _locked(LOCKS / "run", fcntl.LOCK_EX):
            yield
        return
    with _locked(LOCKS / "turnstile", fcntl.LOCK_SH):
        pass  # waits while an exclusive test is queued or running
    with _locked(LOCKS / "run", fcntl.LOCK_SH):
        yield
