"""A TCP proxy the fault tests control, between one kind of client and its server.

- **pass**: bytes flow both ways.
- **drop**: nothing is forwarded either way (held, as TCP holds what a partition drops:
  delivered after ``heal`` unless the endpoints gave up meanwhile); new connections are
  accepted and held too.
- **delay**: each chunk the server sends reaches the client ``delay_s`` late (a slow server:
  every answer is late, requests go through at once).
- **slow**: each answer to a request starts ``delay_s`` late, then streams at full speed (a
  slow object store: every request takes that much longer, however large its body).
- **reset**: every open connection is closed with a reset, and new ones are reset at once.

``upstream`` fixes the server (Redis, S3); without it the proxy speaks HTTP CONNECT, so a
kafka-python client with ``proxy_url="http://127.0.0.1:<port>"`` reaches every broker it is
told of through it (the advertised addresses stay the brokers' own).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType

CHUNK = 65536


class FaultProxy:
    def __init__(self, upstream: tuple[str, int] | None = None) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._mode = "pass"
        self._delay_s = 0.0
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self.connections = 0  # accepted so far
        self.held = 0  # chunks a drop held back
        self.delayed = 0  # answers (slow) or chunks (delay) held back delay_s
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # --- the test's controls ---------------------------------------------------------------
    def drop(self) -> None:
        self._mode = "drop"
        self._flowing.clear()

    def delay(self, seconds: float) -> None:
        self._delay_s = seconds
        self._mode = "delay"
        self._flowing.set()

    def slow(self, seconds: float) -> None:
        self._delay_s = seconds
        self._mode = "slow"
        self._flowing.set()

    def reset(self) -> None:
        self._mode = "reset"
        self._flowing.set()
        with self._lock:
            for sock in list(self._open):
                _reset(sock)
            self._open.clear()

    def heal(self) -> None:
        self._mode, self._delay_s = "pass", 0.0
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self.heal()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in list(self._open):
                _reset(sock)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- the plumbing ------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            if self._mode == "reset":
                _reset(client)
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._flowing.wait()
        try:
            target = self.upstream or _connect_request(client)
            server = socket.create_connection(target, timeout=10)
            server.settimeout(None)
            if self.upstream is None:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._open.update((client, server))
        asked = threading.Event()  # a request went up since the last answer began
        for source, sink, late in ((client, server, False), (server, client, True)):
            threading.Thread(
                target=self._pump, args=(source, sink, late, asked), daemon=True
            ).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, answers: bool, asked: threading.Event
    ) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                if not self._flowing.is_set():
                    self.held += 1
                    self._flowing.wait()  # a drop holds what is in flight
                if not answers:
                    asked.set()
                elif self._mode == "delay" or (self._mode == "slow" and asked.is_set()):
                    asked.clear()
                    self.delayed += 1
                    time.sleep(self._delay_s)
                if self._mode == "reset":
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open.discard(sock)


def _connect_request(client: socket.socket) -> tuple[str, int]:
    """Read an HTTP CONNECT request; the (host, port) it names."""
    head = b""
    while b"\r\n\r\n" not in head:
        data = client.recv(4096)
        if not data:
            raise OSError("closed before CONNECT")
        head += data
    method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
    if method != "CONNECT":
        raise OSError(f"not a CONNECT: {method}")
    host, port = target.rsplit(":", 1)
    return host.strip("[]"), int(port)


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), not a polite FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
