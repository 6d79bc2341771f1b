"""Can this process reach the services it needs? One quick check per service (Kafka, Redis,
S3, the SQL store), each failing with ``ServiceUnreachable``: one line naming the service, its
address, why, and what to do. Commands run these before they start (``require``), so a new
user with no stack running reads that line in a few seconds instead of a traceback after a
client's long bootstrap timeout; ``headrace doctor`` runs them all.

``explain`` turns the errors the clients raise later on (a service gone mid-command) into the
same one line.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

from headrace.config.settings import Settings

TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Service:
    name: str  # as a user says it
    setting: str  # the environment variable that says where it is

    def fix(self) -> str:
        if self.name == "the SQL store":
            return f"check {self.setting} (the database must be running there)"
        return f"start the local stack with `headrace dev up`, or set {self.setting}"


KAFKA = Service("Kafka", "HEADRACE_KAFKA_BOOTSTRAP")
REDIS = Service("Redis", "HEADRACE_REDIS_URL")
S3 = Service("S3", "HEADRACE_S3_ENDPOINT_URL")
SQL = Service("the SQL store", "HEADRACE_SQL_URL")


class ServiceUnreachable(RuntimeError):
    """A service this command needs cannot be reached."""

    def __init__(self, service: Service, address: str, reason: str) -> None:
        self.service = service
        self.address = address
        self.reason = reason
        super().__init__(f"cannot reach {service.name} at {address} ({reason}): {service.fix()}")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (text or type(exc).__name__)[:160]


def check_kafka(settings: Settings) -> None:
    """Some bootstrap server accepts a connection."""
    problems = []
    for server in settings.kafka_bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port)), timeout=TIMEOUT_S):
                return
        except (OSError, ValueError) as exc:
            problems.append(_reason(exc))
    raise ServiceUnreachable(KAFKA, settings.kafka_bootstrap, "; ".join(problems))


def check_redis(settings: Settings) -> None:
    import redis

    from headrace.connections import redis_client

    try:
        redis_client(settings, timeout_s=TIMEOUT_S).ping()
    except (redis.RedisError, OSError) as exc:
        raise ServiceUnreachable(REDIS, _redis_address(settings), _reason(exc)) from exc


def check_s3(settings: Settings) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    from headrace.connections import s3_client

    try:
        s3_client(settings, read_timeout_s=TIMEOUT_S).list_buckets()
    except (BotoCoreError, ClientError, OSError) as exc:
        raise ServiceUnreachable(S3, settings.s3_endpoint_url, _reason(exc)) from exc


def check_sql(settings: Settings) -> None:
    import sqlalchemy as sa

    url = sa.engine.make_url(settings.sql_url)
    if url.get_backend_name() == "sqlite":
        return  # a file: nothing to reach
    args = {"connect_timeout": int(TIMEOUT_S)} if url.get_backend_name() == "postgresql" else {}
    engine = sa.create_engine(url, connect_args=args)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.DBAPIError as exc:
        address = f"{url.host}:{url.port or 5432}/{url.database}"
        raise ServiceUnreachable(SQL, address, _reason(exc.orig or exc)) from exc
    finally:
        engine.dispose()


CHECKS: dict[str, Callable[[Settings], None]] = {
    "kafka": check_kafka,
    "redis": check_redis,
    "s3": check_s3,
    "sql": check_sql,
}


def require(settings: Settings, *services: str) -> None:
    """Raise ServiceUnreachable for the first of ``services`` that cannot be reached."""
    for name in services:
        CHECKS[name](settings)


def _redis_address(settings: Settings) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(settings.redis_url)
    return f"{parts.hostname}:{parts.port or 6379}"


def explain(exc: BaseException, settings: Settings) -> ServiceUnreachable | None:
    """The service behind an error a client raised mid-command, if it is one of reaching a
    service (None for anything else: that is a bug to show in full)."""
    if isinstance(exc, ServiceUnreachable):
        return exc
    import redis
    from botocore.exceptions import EndpointConnectionError
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError
    from sqlalchemy.exc import OperationalError

    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError):
        return ServiceUnreachable(KAFKA, settings.kafka_bootstrap, _reason(exc))
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return ServiceUnreachable(REDIS, _redis_address(settings), _reason(exc))
    if isinstance(exc, EndpointConnectionError):
        return ServiceUnreachable(S3, settings.s3_endpoint_url, _reason(exc))
    if isinstance(exc, OperationalError):
        return ServiceUnreachable(
            SQL, settings.sql_url.rsplit("@", 1)[-1], _reason(exc.orig or exc)
        )
    return None
