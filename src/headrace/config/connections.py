"""Settings of where the services are and what things are called: the broker, Redis, S3 and
the SQL store, their credentials (secrets never have defaults), topic names and local state
(a part of ``Settings``, ``settings.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, Field, SecretStr


class ConnectionSettings(BaseModel):
    # --- connections -----------------------------------------------------------------
    kafka_bootstrap: str = "127.0.0.1:19092"
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    # TLS: set kafka_security_protocol to SSL or SASL_SSL and point these at PEM files.
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_password: SecretStr | None = None
    # Reach the brokers through a proxy: socks5://host:port or http://host:port (HTTP
    # CONNECT); every broker address the cluster advertises is asked of the proxy.
    kafka_proxy_url: str | None = None
    # Which client talks to the broker (headrace.transport), and which broker it is:
    # "tansu" (the local stack) turns on the workarounds only tansu needs (fetch waits that
    # follow demand, the stalled-fetch watch, group rejoin, reading a partition back after an
    # acknowledgement without an offset, client resends, contiguous-offset checks); "kafka"
    # (Apache Kafka, production) turns them off.
    transport: Literal["kafka-python"] = "kafka-python"
    broker_flavor: Literal["tansu", "kafka"] = "tansu"
    # tansu answers a parked fetch only when its wait runs out (see README): consumers wait
    # eagerly while a lone record's latency counts, longer while idle, longest while the model
    # computes. With broker_flavor "kafka" fetches wait kafka_fetch_wait_kafka_ms (the broker
    # answers as soon as a record lands).
    kafka_fetch_wait_kafka_ms: int = Field(default=500, ge=0)
    kafka_fetch_wait_eager_ms: int = Field(default=2, ge=0)
    kafka_fetch_wait_idle_ms: int = Field(default=20, ge=0)
    kafka_fetch_wait_busy_ms: int = Field(default=100, ge=0)
    # and after this long with nothing awaited, dormant: an idle pipeline costs little CPU
    kafka_fetch_wait_dormant_ms: int = Field(default=100, ge=0)
    kafka_fetch_dormant_after_s: float = Field(default=10.0, ge=0)
    # TLS: use a rediss:// URL. The password is kept out of the URL so it never lands in logs.
    redis_url: str = "redis://127.0.0.1:16379/0"
    redis_password: SecretStr | None = None
    s3_endpoint_url: str = "http://127.0.0.1:18333"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_region: str = "us-east-1"
    sql_url: str = "sqlite:///.headrace/headrace.db"

    # --- naming ----------------------------------------------------------------------
    topic_prefix: str = "headrace"
    request_partitions: int = Field(default=1, ge=1)
    state_dir: Path = Path(".headrace")
    # uploaded files, job inputs and job spools (outputs): where every gateway replica and
    # runner pool must reach them (a ReadWriteMany volume in infra/k8s). None: state_dir
    shared_state_dir: Path | None = None
    # /metrics, /healthz and /readyz of a dispatcher, worker or invalidator on this port
    # (None: not served; each command also takes --metrics-port). The gateway serves them on
    # its own HTTP port.
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # "otlp": long-running processes export their spans with OpenTelemetry's OTLP/HTTP
    # exporter (extra [tracing]; OTEL_EXPORTER_OTLP_* say where). "none": the API's no-op,
    # and trace context still travels on every record.
    tracing_exporter: Literal["none", "otlp"] = "none"
    # The gateway's largest upload (POST /v1/files): OpenAI's limit for a batch input file.
    max_file_bytes: int = Field(default=200 * 1024 * 1024, ge=1)
    # What one tenant may hold at the gateway (0: no cap): files and their bytes (uploads
    # and job outputs, expired ones not counted), and jobs not yet ended. Past a cap a new
    # upload or job is answered 429 naming the cap; deleting files, or jobs ending, frees it.
    tenant_max_files: int = Field(default=10_000, ge=0)
    tenant_max_file_bytes: int = Field(default=100 * 1024**3, ge=0)
    tenant_max_open_jobs: int = Field(default=1_000, ge=0)
    # The largest body of any other gateway route (JSON): refused 413 before it is read.
    # 2,048 embedding inputs of ~4 KB each fit; a bigger body is no OpenAI request.
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # Webhooks go only to public addresses, or to hosts / networks listed here (e.g.
    # ["hooks.internal", "10.1.0.0/16"]); each is signed with its tenant's secret, the file
    # <webhook_secrets_dir>/<tenant> (a mounted secret). No secret: no webhooks.
    webhook_allowed_hosts: list[str] = Field(default_factory=list)
    webhook_secrets_dir: Path | None = None
    # Tenants' signing keys, a file named after each (mounted secrets): a tenant with one
    # signs what it produces (the SDK does), and dispatchers take only its signed records
    # (schemas/signing.py). No file: the tenant's records are not signed.
    tenant_keys_dir: Path | None = None
    # Local stack broker storage. "s3" survives broker restarts, but this tansu build stops
    # serving a partition past 1,000 stored batches (measured; see README), so "memory" is
    # the default.
    broker_storage: Literal["memory", "s3"] = "memory"

    def kafka_options(self) -> dict[str, Any]:
        """Connection options shared by every kafka-python client."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.kafka_bootstrap.split(","),
            "security_protocol": self.kafka_security_protocol,
            # the default backoff grows to 30 s; a restarted broker should be found in ~1 s
            "reconnect_backoff_max_ms": 1000,
        }
        if self.kafka_sasl_mechanism:
            options["sasl_mechanism"] = self.kafka_sasl_mechanism
            options["sasl_plain_username"] = self.kafka_sasl_username
            if self.kafka_sasl_password is not None:
                options["sasl_plain_password"] = self.kafka_sasl_password.get_secret_value()
        for name in ("cafile", "certfile", "keyfile"):
            path = getattr(self, f"kafka_ssl_{name}")
            if path is not None:
                options[f"ssl_{name}"] = str(path)
        if self.kafka_ssl_password is not None:
            options["ssl_password"] = self.kafka_ssl_password.get_secret_value()
        if self.kafka_proxy_url:
            options["proxy_url"] = self.kafka_proxy_url
        return options

    @property
    def shared_dir(self) -> Path:
        """Where files and job spools live: ``shared_state_dir``, else ``state_dir``."""
        return self.shared_state_dir or self.state_dir

    def redis_password_value(self) -> str | None:
        return self.redis_password.get_secret_value() if self.redis_password else None

    def port_of(self, url: str) -> int:
        parsed = urlparse(url if "://" in url else f"tcp://{url}")
        if parsed.port is None:
            raise ValueError(f"no port in {url!r}")
        return parsed.port
