"""Start ``headrace`` processes by forking a parent that has imported them already.

A worker spends most of its start importing: torch, Celery and transformers' model modules
(about 5.5 of its 6-7 s on a 2-core machine, before it loads a byte of weights). A local
pipeline that starts and restarts many of them (the test suite: about a hundred workers and
forty dispatchers) pays that every time. With prefork on (``processes.use_prefork``), one
server process per command (worker, dispatcher) and caller imports what that command
imports, once (``PRELOAD``), and forks a child per process,
which runs the same ``headrace`` command line with its own environment, stdin from
/dev/null and stdout/stderr to the pipe its caller passed over the socket, as
``subprocess.Popen`` would. Gunicorn's ``--preload`` and Celery's prefork pool start their
children the same way.

What differs from a fresh interpreter: modules in ``PRELOAD`` read their own environment
variables when the server imported them (headrace reads none at import; a third-party one
might), and the child is the server's child, not its caller's: ``Forked`` stands in for
``Popen`` (its pid, signals, exit status reported by the server). The server forks from one
thread and exits when its caller does.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

# What each command imports before it serves, one server per command: a dispatcher forked
# from a parent that imported the worker's modules too would serve their (empty) metric
# families, and `headrace top` would take it for a worker. transformers resolves a model's
# modules lazily, at the first from_pretrained: the worker's are named here.
PRELOAD: dict[str, tuple[str, ...]] = {
    "worker": (
        "headrace.ops.cli",
        "headrace.workers.worker",
        "headrace.workers.loading",
        "celery.apps.worker",
        "celery.worker.consumer",
        "kombu.transport.redis",
        "transformers.models.auto.modeling_auto",
        "transformers.models.auto.tokenization_auto",
        "transformers.models.bert.modeling_bert",  # MiniLM and the cross-encoders
        "transformers.models.gpt2.modeling_gpt2",  # the test LM
    ),
    "dispatcher": ("headrace.ops.cli", "headrace.workers.dispatcher.io.shell"),
}
_MESSAGE_LIMIT = 1 << 20
_STARTED = b"ready\n"


class PreforkError(RuntimeError):
    pass


# --- the caller's side ----------------------------------------------------------------------
class Forked:
    """A forked child, with the part of ``subprocess.Popen``'s interface ``Proc`` uses."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int, stdout: IO[bytes]) -> None:
        self.args = args
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._conn = conn
        self._buffer = b""
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                self._read(blocking=False)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self.returncode is not None:
                    return self.returncode
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
                self._read(blocking=True, timeout=min(0.1, left) if left is not None else 0.1)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self, blocking: bool, timeout: float = 0.0) -> None:
        """Take the server's exit report for this child, if it came (under the lock)."""
        if b"\n" not in self._buffer:
            self._conn.settimeout(timeout if blocking else 0.0)
            try:
                chunk = self._conn.recv(4096)
            except (BlockingIOError, TimeoutError):
                return
            except OSError:
                chunk = b""
            if not chunk:  # the server is gone: the child's fate is only its pid's
                self._orphaned()
                return
            self._buffer += chunk
        if b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self.returncode = int(json.loads(line)["exit"])
            self._conn.close()

    def _orphaned(self) -> None:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            self.returncode = 255  # its exit status went with the server
        else:
            time.sleep(0.05)


class Preforker:
    """The server process for ``command`` (started here) and a way to ask it for children."""

    def __init__(self, command: str) -> None:
        self._dir = tempfile.mkdtemp(prefix="headrace-prefork-")
        self.socket_path = str(Path(self._dir) / "server.sock")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._server = subprocess.Popen(
            [sys.executable, "-m", "headrace.ops.prefork", self.socket_path, command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self._server.stdout is not None
        ready = self._server.stdout.readline()  # after the imports, or empty if it died
        if ready != _STARTED:
            self._server.kill()
            raise PreforkError(f"the prefork server did not start ({ready!r})")
        atexit.register(self.close)

    def spawn(self, args: list[str], env: dict[str, str]) -> Forked:
        """A child running ``headrace ARGS`` with ``env``; its output on ``Forked.stdout``."""
        read_end, write_end = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.socket_path)
            request = {"args": args, "env": env, "cwd": os.getcwd()}
            message = json.dumps(request).encode() + b"\n"
            socket.send_fds(conn, [message], [write_end])
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    raise PreforkError("the prefork server closed the connection")
                reply += chunk
        except BaseException:
            conn.close()
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        pid = int(json.loads(reply)["pid"])
        return Forked(args, conn, pid, os.fdopen(read_end, "rb"))

    def close(self) -> None:
        if self._server.poll() is None:
            self._server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._server.wait(5)
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
            os.rmdir(self._dir)


_shared: dict[str, Preforker] = {}
_shared_lock = threading.Lock()


def shared(command: str) -> Preforker:
    """This process's prefork server for ``command`` (a key of ``PRELOAD``), started at the
    first call."""
    with _shared_lock:
        server = _shared.get(command)
        if server is None or server._server.poll() is not None:
            server = _shared[command] = Preforker(command)
        return server


# --- the server -----------------------------------------------------------------------------
def serve(socket_path: str, command: str) -> None:
    for name in PRELOAD[command]:
        importlib.import_module(name)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through wake_w
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    sys.stdout.buffer.write(_STARTED)
    sys.stdout.flush()
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=0.5):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                pid = _fork_one(conn, [listener, wake_r, wake_w, *children.values()])
                if pid is not None:
                    children[pid] = conn
            else:
                with contextlib.suppress(BlockingIOError):
                    wake_r.recv(4096)
        _reap(children)


def _fork_one(conn: socket.socket, closers: list[socket.socket]) -> int | None:
    """Fork the child ``conn`` asks for; its pid (None if the request was unreadable)."""
    try:
        conn.settimeout(10)
        message, fds, _, _ = socket.recv_fds(conn, _MESSAGE_LIMIT, 1)
        while not message.endswith(b"\n"):
            more = conn.recv(_MESSAGE_LIMIT)
            if not more:
                raise ValueError("request cut short")
            message += more
        request = json.loads(message)
        if len(fds) != 1:
            raise ValueError("no output descriptor")
    except (OSError, ValueError) as exc:
        print(f"prefork: bad request: {exc}", file=sys.stderr)
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, fds[0], [conn, *closers])
    os.close(fds[0])
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return pid


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            report = {"exit": os.waitstatus_to_exitcode(status)}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(report).encode() + b"\n")
            conn.close()


def _child(request: dict[str, Any], out_fd: int, closers: list[socket.socket]) -> None:
    """In the forked child: become ``headrace ARGS`` in the caller's directory, with its
    environment; never returns."""
    code: Any = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sock in closers:
            sock.close()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(null)
        os.close(out_fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["headrace", *request["args"]]
        if "numpy" in sys.modules:  # its global generator is not reseeded at fork
            sys.modules["numpy"].random.seed()
        from headrace.ops.cli import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
