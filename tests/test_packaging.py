"""The installed distribution has one import name, ``headrace``: the wheel holds nothing
else at its top level, and every module of the repository's package folders is in it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = ("producers", "workers", "consumers", "schemas")


def _build_wheel(tmp_path: Path) -> Path:
    """From a copy of the files git knows (as a clean clone has them)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    source = tmp_path / "source"
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = out.glob("headrace-*.whl")
    return wheel


def test_the_wheel_holds_one_top_level_name_and_every_module(tmp_path: Path) -> None:
    names = zipfile.ZipFile(_build_wheel(tmp_path)).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"headrace"}
    expected = {
        f"headrace/{p.relative_to(ROOT / 'src' / 'headrace').as_posix()}"
        for p in (ROOT / "src" / "headrace").rglob("*.py")
    } | {
        f"headrace/{p.relative_to(ROOT).as_posix()}"
        for folder in MAPPED
        for p in (ROOT / folder).rglob("*.py")
    }
    assert expected - set(names) == set()
    assert "headrace/py.typed" in names
    assert not [n for n in names if n.startswith(("headrace/bench/", "headrace/tests/"))]
