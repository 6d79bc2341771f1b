"""Hostile bodies against a real gateway process: a huge body, declared or chunked, is
refused 413 (OpenAI's error shape) before it is read and before authentication, and the
gateway's memory does not grow with it; a text far past the model's context is refused
before it is tokenized. Good requests sent right after are answered."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from headrace.ops.processes import Pipeline
from tests.gateway.gateway_proc import auth, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODEL = "all-MiniLM-L6-v2"
MB = 1024 * 1024


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def gateway(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str], int]]:
    procs: list[subprocess.Popen[bytes]] = []
    env = {"HEADRACE_TOPIC_PREFIX": shared_prefix}
    with running_gateway(env, tmp_path, started=procs) as (url, keys):
        yield url, keys, procs[0].pid


def raw_post(url: str, head: str, chunks: Iterator[bytes]) -> tuple[int, bytes, int]:
    """POST over a plain socket: ``head`` (request line and headers), then ``chunks`` until
    the server answers or closes. (status, body, bytes sent)."""
    host, port = url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode())
        sock.settimeout(0.01)
        answer = b""
        for chunk in chunks:
            try:
                sock.sendall(chunk)
                sent += len(chunk)
            except OSError:  # the server answered and closed
                break
            try:
                answer += sock.recv(65536)
                if answer:
                    break
            except TimeoutError:
                continue
        sock.settimeout(10)
        while not _complete(answer):
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1], sent


def _complete(answer: bytes) -> bool:
    """The response's headers and as much body as its Content-Length says are in."""
    if b"\r\n\r\n" not in answer:
        return False
    head, body = answer.split(b"\r\n\r\n", 1)
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return True


def test_big_bodies_are_refused_before_they_are_read(
    gateway: tuple[str, dict[str, str], int],
) -> None:
    url, keys, pid = gateway
    before = rss_mb(pid)
    declared = (
        "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {300 * MB}\r\n\r\n"
    )
    started = time.monotonic()
    status, body, sent = raw_post(url, declared, (b"x" * MB for _ in range(300)))
    assert status == 413 and b'"request_too_large"' in body and b'"error"' in body
    assert time.monotonic() - started < 10 and sent < 100 * MB
    chunked = (
        "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {keys['acme']}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = f"{MB:x}\r\n".encode() + b"x" * MB + b"\r\n"
    status, body, sent = raw_post(url, chunked, (chunk for _ in range(300)))
    assert status == 413 and b'"request_too_large"' in body
    assert sent < 100 * MB
    grew = rss_mb(pid) - before
    assert grew < 100, f"the gateway grew by {grew:.0f} MB"
    with httpx.Client(base_url=url, timeout=60, headers=auth(keys["acme"])) as http:
        ok = http.post("/v1/embeddings", json={"model": MODEL, "input": ["after the flood"]})
        assert ok.status_code == 200, ok.text


def test_a_text_far_past_the_context_is_refused_before_it_is_tokenized(
    gateway: tuple[str, dict[str, str], int],
) -> None:
    url, keys, pid = gateway
    before = rss_mb(pid)
    with httpx.Client(base_url=url, timeout=60, headers=auth(keys["acme"])) as http:
        started = time.monotonic()
        long = http.post("/v1/embeddings", json={"model": MODEL, "input": "word " * 1_500_000})
        took = time.monotonic() - started
        assert long.status_code == 400, long.text
        assert "characters" in long.json()["error"]["message"]
        assert took < 5, f"refused after {took:.1f}s"
        ok = http.post("/v1/embeddings", json={"model": MODEL, "input": "a short one"})
        assert ok.status_code == 200, ok.text
    grew = rss_mb(pid) - before
    assert grew < 300, f"the gateway grew by {grew:.0f} MB"


def test_made_up_http_methods_share_one_metric_label(
    gateway: tuple[str, dict[str, str], int],
) -> None:
    url, _, _ = gateway
    with httpx.Client(base_url=url, timeout=30) as http:
        for verb in ("BREW", "WHEN", "XYZZY"):
            http.request(verb, "/v1/embeddings")
        scraped = http.get("/metrics").text
    assert 'method="other"' in scraped
    assert not any(f'method="{verb}"' in scraped for verb in ("BREW", "WHEN", "XYZZY"))
