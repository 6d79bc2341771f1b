"""What the image does, without Docker (which cannot run here): copy exactly the files
infra/Dockerfile copies into a clean folder, install them into a fresh virtual environment
the way the image does, then run the entrypoint's ``--help`` and import every module, from a
folder where the repository is not on the path."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "infra" / "Dockerfile"
PACKAGE_FOLDERS = ("src/headrace", "producers", "workers", "consumers", "schemas")
# a script alembic runs inside a migration, not a module to import
NOT_IMPORTABLE = {"headrace.sql.migrations.env"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY line of the Dockerfile."""
    out = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            out.append((sources, dest))
    return out


def install_args() -> list[str]:
    """The arguments of the Dockerfile's install of the project (its last ``RUN pip install``),
    relative to the image's working directory."""
    installs = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("RUN pip")]
    return [arg for arg in installs[-1].split()[3:] if arg != "--no-cache-dir"]


def torch_spec() -> str:
    match = re.search(r'ARG TORCH_SPEC="([^"]+)"', DOCKERFILE.read_text())
    assert match, "the Dockerfile names the torch it installs"
    return os.environ.get("HEADRACE_TORCH_SPEC", match[1])


def test_the_image_installs_and_every_module_imports(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for sources, dest in copies():
        for source in sources:
            target = app / dest / Path(source).name if dest.endswith("/") else app / dest
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=ignore)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / source, target)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # --no-compile: no .pyc for every module of torch up front (the modules imported below are
    # compiled as they are imported); what is installed is the image's, byte for byte otherwise
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    subprocess.run([*pip, torch_spec()], check=True, cwd=tmp_path)
    subprocess.run([*pip, *install_args()], check=True, cwd=app)

    elsewhere = tmp_path / "elsewhere"  # not the repository: only the installed package
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    helped = subprocess.run(
        [str(venv / "bin" / "headrace"), "--help"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert helped.returncode == 0, helped.stderr
    assert "dispatcher" in helped.stdout and "doctor" in helped.stdout

    walk = (
        "import importlib, pkgutil, headrace\n"
        "names = [m.name for m in pkgutil.walk_packages(headrace.__path__, 'headrace.')]\n"
        f"names = [n for n in names if n not in {sorted(NOT_IMPORTABLE)!r}]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", walk],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 0, imported.stderr
    in_tree = sum(
        1
        for folder in PACKAGE_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "__init__.py" or path.parent != ROOT / "src" / "headrace"
    )
    # every module of the tree is in the image, and imports
    assert int(imported.stdout.strip()) == in_tree - len(NOT_IMPORTABLE)
