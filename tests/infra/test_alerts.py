"""The alert rules and the dashboard: promtool checks the rules and runs their unit tests
(infra/prometheus/alerts_test.yml), and every series they name is one headrace exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import headrace.gateway.http_observability
import headrace.workers.dispatcher.io.metrics
import headrace.workers.metrics  # noqa: F401 - registers the worker's series

INFRA = Path(__file__).resolve().parents[2] / "infra"
RULES = INFRA / "prometheus" / "alerts.yml"
SERIES = re.compile(r"\bheadrace_\w+")


def exported() -> set[str]:
    """Every sample name headrace's modules register (histogram and counter suffixes too)."""
    names = set()
    kinds = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(s.name for s in family.samples)
        names.update(family.name + k for k in kinds.get(family.type, ()))
    return names


def test_rules_and_dashboard_name_only_exported_series() -> None:
    known = exported()
    rules = yaml.safe_load(RULES.read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads((INFRA / "grafana" / "headrace.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    named = {name for expr in exprs for name in SERIES.findall(expr)}
    assert named and named <= known, sorted(named - known)


def test_promtool_checks_the_rules_and_runs_their_tests() -> None:
    if shutil.which("promtool") is None:
        pytest.skip("no promtool here (apt-get install prometheus)")
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr
