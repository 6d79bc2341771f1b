"""constraints.txt, the versions ``./dev setup`` and the image install under, covers what the
project asks for: a dependency added to pyproject.toml without ``./dev lock`` would install
at whatever version is newest that day, which is how a clean CI run can fail on code that
passed the day before."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
UNPINNED = {"torch"}  # TORCH_SPEC names it: CPU and CUDA builds differ


def pins() -> dict[str, Version]:
    out: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            out[canonicalize_name(name)] = Version(version)
    return out


def test_every_dependency_and_dev_tool_is_pinned_at_a_version_it_allows() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    asked = project["dependencies"] + project["optional-dependencies"]["dev"]
    wanted = [Requirement(r) for r in asked]
    pinned = pins()
    missing = [
        str(r) for r in wanted if r.name not in UNPINNED and canonicalize_name(r.name) not in pinned
    ]
    assert not missing, f"not in constraints.txt (run ./dev lock): {missing}"
    outside = [
        f"{r} (pinned {pinned[canonicalize_name(r.name)]})"
        for r in wanted
        if r.name not in UNPINNED and pinned[canonicalize_name(r.name)] not in r.specifier
    ]
    assert not outside, f"constraints.txt pins versions pyproject.toml refuses: {outside}"
    assert not UNPINNED & set(pinned), "torch is left to TORCH_SPEC"
