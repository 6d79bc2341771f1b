"""GatewayConfig: the gateway's part of the settings, taken once in ``create_app``; its
defaults are the settings' own."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.gateway.config import GatewayConfig


def test_bare_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("HEADRACE_")]:
        monkeypatch.delenv(name)
    of_settings = GatewayConfig.of(Settings())
    assert GatewayConfig(files_dir=of_settings.files_dir) == of_settings


def test_files_live_under_the_shared_state(tmp_path: Path) -> None:
    config = GatewayConfig.of(
        Settings(state_dir=tmp_path / "own", shared_state_dir=tmp_path / "shared")
    )
    assert config.files_dir == (tmp_path / "shared" / "files").resolve()
    changed = dataclasses.replace(config, tenant_max_open_jobs=3)
    assert changed.tenant_max_open_jobs == 3 and config.tenant_max_open_jobs != 3
