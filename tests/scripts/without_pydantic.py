"""Runs a GPU script on CPU (``--device cpu --quick``) as the GPU machine would: in a fresh
interpreter where ``import pydantic`` fails (that machine may not have it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from headrace.models.registry import model_spec

ROOT = Path(__file__).resolve().parents[2]
RUN = """
import runpy, sys
sys.modules["pydantic"] = None  # import pydantic now fails
script = sys.argv[1]
sys.argv = [script, *sys.argv[2:]]
runpy.run_path(script, run_name="__main__")
"""


def quick_report(script: str, out: Path, timeout_s: float) -> dict[str, Any]:
    """Run ``scripts/<script>`` with MiniLM, on CPU, quick; its JSON report."""
    model_dir = str(model_spec("all-MiniLM-L6-v2").path)
    args = ["--device", "cpu", "--quick", "--model-dir", model_dir, "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", RUN, f"scripts/{script}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    return report
