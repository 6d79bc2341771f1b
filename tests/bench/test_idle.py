"""The idle bench on the real stack, shortened (dormant after 1 s, 1 s windows): it reads
each process's CPU while the pipeline idles and times a lone request after a silence."""

from __future__ import annotations

import pytest

from bench.idle import main
from headrace.ops.localstack import LocalStack

pytestmark = pytest.mark.timeout(300)


def test_it_reads_each_process_s_idle_cpu_and_a_request_after_a_silence(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HEADRACE_KAFKA_FETCH_DORMANT_AFTER_S", "1")
    [run] = main(seconds=1.0, silence=1.5, lone=1, compare=False)
    assert set(run.cpu_percent) == {"dispatcher", "worker", "tansu", "this process (client)"}
    assert all(0.0 <= v < 200.0 for v in run.cpu_percent.values()), run
    assert len(run.after_silence_ms) == 1 and run.after_silence_ms[0] > 0
    assert "idle CPU over 1 s" in capsys.readouterr().out
