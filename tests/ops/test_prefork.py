"""A child forked by the prefork server runs a ``headrace`` command as a fresh interpreter
does (its arguments, environment, directory, output and exit status), and answers signals
as a ``Popen`` child does. No service is needed: ``headrace settings`` prints what it read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.ops import prefork
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Proc
from tests.conftest import unique_prefix


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def _settings_of(output: bytes) -> dict[str, object]:
    shown: dict[str, object] = json.loads(output[output.index(b"{") :])
    return shown


def test_a_forked_command_prints_what_a_fresh_one_prints(tmp_path: Path) -> None:
    env = _env(HEADRACE_TOPIC_PREFIX="forked-7", HEADRACE_MAX_BATCH_TOKENS="333")
    fresh = subprocess.run(
        [sys.executable, "-m", "headrace.ops.cli", "settings"],
        env=env,
        capture_output=True,
        check=True,
        cwd=tmp_path,
    )
    child = prefork.shared("worker").spawn(["settings"], env)
    assert child.stdout is not None
    output = child.stdout.read()
    assert child.wait(30) == 0
    assert child.pid != os.getpid()
    forked, fresh_settings = _settings_of(output), _settings_of(fresh.stdout)
    assert forked["topic_prefix"] == "forked-7" and forked["max_batch_tokens"] == 333
    assert forked == fresh_settings


def test_the_child_runs_in_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "headrace.toml").write_text('topic_prefix = "from-the-file"\n')
    monkeypatch.chdir(tmp_path)
    env = _env(HEADRACE_CONFIG="headrace.toml")  # relative: read from the child's directory
    env.pop("HEADRACE_TOPIC_PREFIX", None)
    child = prefork.shared("worker").spawn(["settings"], env)
    assert child.stdout is not None
    output = child.stdout.read()
    assert child.wait(30) == 0, output
    assert _settings_of(output)["topic_prefix"] == "from-the-file"


def test_exit_status_is_the_commands_own() -> None:
    child = prefork.shared("worker").spawn(["no-such-command"], _env())
    assert child.stdout is not None
    assert b"No such command" in child.stdout.read()
    assert child.wait(30) == 2  # typer's usage error, as a fresh interpreter exits


def test_signals_reach_the_child_and_its_status_says_so(stack: LocalStack, tmp_path: Path) -> None:
    # a worker whose loading hangs (on purpose) lives until it is signalled
    env = _env(
        HEADRACE_TOPIC_PREFIX=unique_prefix("prefork"),
        HEADRACE_FAULT_HANG_STAGE="load_weights",
        HEADRACE_LOAD_WEIGHTS_TIMEOUT_S="120",
    )
    for sig in (signal.SIGKILL, signal.SIGTERM):
        proc = Proc("w", ["worker"], env, tmp_path)
        proc.launch()
        assert isinstance(proc.popen, prefork.Forked)
        assert proc.alive() and proc.exit_code() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.popen.wait(0.2)
        os.kill(proc.pid, sig)
        assert proc.popen.wait(30) == -sig
        assert proc.exit_code() == -sig and not proc.alive()


def test_the_dispatchers_parent_imports_nothing_of_the_workers() -> None:
    """A forked process serves the metric families its parent's imports registered: the
    dispatcher's parent must not import the worker's (`headrace top` tells them apart by
    those), nor torch (a dispatcher starts without it, tests/test_startup.py)."""
    names = " ".join(prefork.PRELOAD["dispatcher"])
    code = (
        f"import importlib, sys\nfor n in {names!r}.split(): importlib.import_module(n)\n"
        "print(' '.join(m for m in ('torch', 'headrace.workers.metrics') if m in sys.modules))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == ""
    assert "headrace.workers.worker" in prefork.PRELOAD["worker"]
