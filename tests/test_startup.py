"""What a process imports to start. The dispatcher, the gateway and the client never need
torch (a worker does): importing it costs about 2.5 s of CPU, paid by every such process at
start (and by every test that starts one). A fresh interpreter imports each entry point
and reports whether torch came with it."""

from __future__ import annotations

import subprocess
import sys

import pytest

ENTRY_POINTS = {
    "the CLI": "import headrace.ops.cli",
    "the dispatcher": "import headrace.ops.cli, headrace.workers.dispatcher.io.shell",
    "the gateway": "import headrace.ops.cli, headrace.gateway.gateway",
    "the client": "import headrace.producers.client",
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_starting_it_does_not_import_torch(entry: str) -> None:
    heavy = "{'torch', 'transformers'}"
    code = f"import sys; {ENTRY_POINTS[entry]}; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", f"{entry} imports {out.stdout.strip()}"


def test_a_worker_does_import_torch() -> None:
    """The check above can fail: the worker's entry point does bring torch."""
    code = "import sys, headrace.workers.worker; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "True"
