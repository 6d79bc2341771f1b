"""The fault tests' proxy itself, against a local echo server: it forwards, holds during a
drop and delivers after, answers late during a delay, resets; and it speaks HTTP CONNECT."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: _echo(c), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[:2]
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):  # the proxy's reset ends it
        while data := conn.recv(1024):
            conn.sendall(data)


@pytest.fixture
def connect() -> Iterator[Callable[[int], socket.socket]]:
    """Open a connection to a local port; closed when the test ends."""
    opened: list[socket.socket] = []

    def open_to(port: int) -> socket.socket:
        opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        return opened[-1]

    yield open_to
    for sock in opened:
        sock.close()


def ask(sock: socket.socket, payload: bytes) -> tuple[bytes, float]:
    started = time.monotonic()
    sock.sendall(payload)
    return sock.recv(1024), time.monotonic() - started


def test_it_forwards_holds_delays_and_resets(
    echo: tuple[str, int], connect: Callable[[int], socket.socket]
) -> None:
    with FaultProxy(echo) as proxy:
        sock = connect(proxy.port)
        assert ask(sock, b"one")[0] == b"one"
        proxy.delay(0.3)
        answer, took = ask(sock, b"two")
        assert answer == b"two" and took >= 0.3
        proxy.drop()
        sock.sendall(b"three")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1024)  # held
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(1024) == b"three"  # delivered after the heal
        proxy.reset()
        with pytest.raises(OSError):
            ask(sock, b"four")
            ask(sock, b"five")


def test_it_speaks_http_connect(
    echo: tuple[str, int], connect: Callable[[int], socket.socket]
) -> None:
    with FaultProxy() as proxy:
        sock = connect(proxy.port)
        sock.sendall(f"CONNECT {echo[0]}:{echo[1]} HTTP/1.1\r\n\r\n".encode())
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        assert ask(sock, b"through")[0] == b"through"


def test_slow_makes_each_answer_start_late_not_each_chunk(
    connect: Callable[[int], socket.socket],
) -> None:
    """A server whose every answer is 1 MiB (16 of the proxy's chunks): slow(0.3) costs each
    request 0.3 s once, where delay(0.3) would cost each chunk."""
    body = b"x" * (1 << 20)
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                while conn.recv(1024):
                    conn.sendall(body)

    threading.Thread(target=serve, daemon=True).start()
    with FaultProxy(server.getsockname()[:2]) as proxy:
        sock = connect(proxy.port)
        proxy.slow(0.3)
        for _ in range(2):
            started = time.monotonic()
            sock.sendall(b"get")
            got = 0
            while got < len(body):
                got += len(sock.recv(1 << 16))
            took = time.monotonic() - started
            assert 0.3 <= took < 0.3 * 3, took  # late once, not once per chunk
        assert proxy.delayed == 2
    server.close()
