"""infra/docker-compose.yml: the services production needs, GPU reservation, no secrets."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "infra" / "docker-compose.yml"


def compose_argv() -> list[str]:
    """How to call Docker Compose here (the test skips, saying so, where there is none)."""
    binary = shutil.which("docker-compose")
    if binary:
        return [binary]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    pytest.skip("no docker compose here (apt-get install docker-compose)")


def test_compose_has_the_production_services() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"kafka", "redis", "postgres", "s3", "dispatcher", "worker"} <= set(services)
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft
    for name in ("dispatcher", "worker"):  # Apache Kafka: the tansu workarounds off
        assert services[name]["environment"]["HEADRACE_BROKER_FLAVOR"] == "kafka"
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert {"init", "gateway", "invalidator"} <= set(services)
    assert services["init"]["command"] == ["init"] and services["init"]["restart"] == "no"
    for name in ("dispatcher", "worker", "gateway", "invalidator"):
        service = services[name]
        assert service["depends_on"]["init"] == {"condition": "service_completed_successfully"}
        assert service["healthcheck"]["test"][0] == "CMD", name
        assert service["restart"] == "unless-stopped"
    assert "headrace" in services["dispatcher"]["healthcheck"]["test"]
    assert "/openapi.json" in " ".join(services["gateway"]["healthcheck"]["test"])
    text = COMPOSE.read_text().lower()
    assert "password:" not in text.replace("_password:", "")  # secrets only by ${VAR}


def test_compose_config_validates() -> None:
    argv = compose_argv()
    secrets = {"REDIS_PASSWORD": "x", "S3_SECRET_ACCESS_KEY": "x", "POSTGRES_PASSWORD": "x"}
    env = {**os.environ, **secrets}
    result = subprocess.run([*argv, "-f", str(COMPOSE), "config"], env=env, capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    missing = subprocess.run(
        [*argv, "-f", str(COMPOSE), "config"],
        env={k: v for k, v in env.items() if k != "REDIS_PASSWORD"},
        capture_output=True,
    )
    assert missing.returncode != 0 and b"REDIS_PASSWORD" in missing.stderr


HARDENED = COMPOSE.parent / "docker-compose.hardened.yml"
HEADRACE_SERVICES = ("init", "dispatcher", "gateway", "invalidator", "worker")


def test_the_hardened_profile_logs_every_role_in_and_locks_its_container() -> None:
    spec = yaml.safe_load(HARDENED.read_text())["services"]
    kafka = spec["kafka"]["environment"]
    assert "PLAINTEXT://" not in kafka["KAFKA_LISTENERS"].replace("SASL_PLAINTEXT://", "")
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert "StandardAuthorizer" in kafka["KAFKA_AUTHORIZER_CLASS_NAME"]
    jaas = kafka["KAFKA_LISTENER_NAME_SASL___PLAINTEXT_PLAIN_SASL_JAAS_CONFIG"]
    users = set()
    for name in HEADRACE_SERVICES:
        service = spec[name]
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        env = service["environment"]
        assert env["HEADRACE_KAFKA_SECURITY_PROTOCOL"].startswith("SASL_"), name
        user = env["HEADRACE_KAFKA_SASL_USERNAME"]
        assert f'user_{user}="${{' in jaas, name  # the broker knows it, its password by ${VAR}
        assert env["HEADRACE_KAFKA_SASL_PASSWORD"].startswith("${"), name
        users.add(user)
    assert len(users) == len(HEADRACE_SERVICES)  # one principal per role (init: admin)
    acls = (COMPOSE.parent / "kafka-acls.sh").read_text()
    for user in users - {"admin"}:
        assert f"allow {user} " in acls, user
    assert spec["init"]["depends_on"]["acls"] == {"condition": "service_completed_successfully"}
    text = HARDENED.read_text().lower()
    assert "password:" not in text.replace("_password:", "")  # secrets only by ${VAR}


def test_the_hardened_profile_validates_over_the_base() -> None:
    argv = compose_argv()
    secrets = {
        name: "x"
        for name in (
            "REDIS_PASSWORD",
            "S3_SECRET_ACCESS_KEY",
            "POSTGRES_PASSWORD",
            "KAFKA_ADMIN_PASSWORD",
            "KAFKA_GATEWAY_PASSWORD",
            "KAFKA_DISPATCHER_PASSWORD",
            "KAFKA_WORKER_PASSWORD",
            "KAFKA_INVALIDATOR_PASSWORD",
        )
    }
    files = ["-f", str(COMPOSE), "-f", str(HARDENED)]
    result = subprocess.run(
        [*argv, *files, "config"], env={**os.environ, **secrets}, capture_output=True
    )
    assert result.returncode == 0, result.stderr.decode()
    merged = yaml.safe_load(result.stdout)["services"]
    assert merged["worker"]["read_only"] is True
    assert merged["worker"]["environment"]["HEADRACE_BROKER_FLAVOR"] == "kafka"  # the base's
    assert merged["worker"]["environment"]["HEADRACE_KAFKA_SASL_USERNAME"] == "headrace-worker"
