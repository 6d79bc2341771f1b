"""``headrace api-key create|list|revoke`` on a SQLite job store, and ``headrace settings``
never printing the SQL password."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from headrace.ops.cli import app


def test_api_keys_from_the_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HEADRACE_SQL_URL", f"sqlite:///{tmp_path}/keys.db")
    runner = CliRunner()
    made = runner.invoke(app, ["api-key", "create", "--tenant", "acme", "--label", "ci"])
    assert made.exit_code == 0, made.output
    key = made.output.strip()
    assert key.startswith("hr-")
    bad = runner.invoke(app, ["api-key", "create", "--tenant", "a:b"])
    assert bad.exit_code == 2 and "tenant name" in bad.output
    listed = runner.invoke(app, ["api-key", "list"])
    assert listed.exit_code == 0 and "acme" in listed.output and key not in listed.output
    revoked = runner.invoke(app, ["api-key", "revoke", key])
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    again = runner.invoke(app, ["api-key", "revoke", key])
    assert again.exit_code == 2


def test_settings_mask_the_sql_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_SQL_URL", "postgresql+psycopg://jobs:s3cret-pw@db:5432/jobs")
    shown = CliRunner().invoke(app, ["settings"])
    assert shown.exit_code == 0, shown.output
    assert "s3cret-pw" not in shown.output and "jobs:***@db" in shown.output
