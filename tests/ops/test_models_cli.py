"""`headrace models` from the command line, on a SQLite registry and the local stack's
Redis: register, list, show, deploy a split, look at its status, promote, roll back,
remove; wrong input is one line and exit code 65."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headrace.ops.cli import app
from headrace.ops.localstack import LocalStack
from headrace.schemas.manifest import ModelManifest
from tests.models.copies import minilm_copy

pytestmark = pytest.mark.timeout(120)


def test_a_model_from_registration_through_rollout_to_removal(
    stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEADRACE_SQL_URL", f"sqlite:///{tmp_path}/registry.db")
    monkeypatch.setenv("HEADRACE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", f"t-models-cli-{uuid.uuid4().hex[:8]}")
    folder = minilm_copy(tmp_path / "enc")
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, ["models", *args])
        assert result.exit_code == code, result.output
        return result.output

    out = run("add", "enc", "--source", str(folder), "--version", "v1")
    assert "registered enc:v1: embed, BertModel (bert), F32" in out
    run("add", "enc", "--source", str(folder), "--version", "v2", "--label", "TEST VERSION")
    listed = run("list")
    assert "v1 *" in listed and "v2" in listed and "TEST VERSION" in listed
    manifest = ModelManifest.model_validate_json(run("show", "enc:v2", "--json"))
    assert manifest.version == "v2" and manifest.file("model.safetensors") is not None
    assert "model.safetensors" in run("show", "enc")

    deployed = run("deploy", "enc:v2", "--split", "20", "--sticky", "tenant")
    assert "revision 1" in deployed and "v1 80%, v2 20%" in deployed
    status = run("status", "enc")
    assert "revision 1" in status and "sticky by tenant" in status and "deploy by cli" in status
    assert "revision 2" in run("promote", "enc")  # the split's other version
    assert "rolled back the promotion of v2 (back to v1)" in run("rollback", "enc")
    run("remove", "enc:v2")
    assert "enc:v2" not in run("list")

    # refusals: one line each, exit 65
    assert "is registered already" in run(
        "add", "enc", "--source", str(folder), "--version", "v1", code=65
    )
    assert "does not exist" in run("add", "x", "--source", str(tmp_path / "none"), code=65)
    assert "choose one of" in run("deploy", "enc:v1", code=65)
    assert "is not registered" in run("deploy", "enc:v9", "--canary", code=65)
    assert "serves traffic" in run("remove", "enc:v1", code=65)
    assert "nothing to roll back" in run("rollback", "enc", code=65)
    canary = run("deploy", "enc:v1", "--canary", code=65)
    assert "stable version already" in canary
    assert (
        json.loads((tmp_path / "state/models/enc/v1/model-manifest.json").read_text())["version"]
        == "v1"
    )
