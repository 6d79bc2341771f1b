"""infra/k8s, checked offline: every Kubernetes object against the API's own schema (strict,
kubernetes-validate's bundled schemas), the KEDA ScaledObjects against KEDA's spec
(infra/k8s/schemas), and the manifests against each other and the code: the worker groups
cover every bucket once, each ScaledObject scales its own group on that group's buckets, on
a series headrace exports."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

import headrace.workers.dispatcher.io.metrics  # noqa: F401 - registers the dispatcher's series
from headrace.config.settings import Settings
from headrace.ops.scaling import ScalingPolicy
from tests.infra.test_alerts import SERIES, exported

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"
KUBERNETES = "1.30.0"
SCALED_OBJECT = K8S / "schemas" / "keda-scaledobject.schema.json"


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def scaled_object_schema() -> dict[str, Any]:
    return yaml.safe_load(SCALED_OBJECT.read_text())  # JSON is YAML


def test_kustomization_lists_every_manifest() -> None:
    [kustomization] = of_kind("Kustomization")
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_every_kubernetes_object_passes_the_api_schema_strictly() -> None:
    checked: dict[str, int] = {}
    for doc in documents():
        if doc["apiVersion"].startswith(("keda.sh/", "kustomize.config.k8s.io/")):
            continue
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        checked[doc["kind"]] = checked.get(doc["kind"], 0) + 1
    assert checked["Deployment"] == 6  # dispatcher, 3 worker groups, gateway, invalidator
    assert {"HorizontalPodAutoscaler", "Service", "Job", "ConfigMap"} <= set(checked)


def test_strict_validation_refuses_a_misspelt_field() -> None:
    [dispatcher] = [d for d in of_kind("Deployment") if "dispatcher" in d["metadata"]["name"]]
    broken = copy.deepcopy(dispatcher)
    broken["spec"]["replica"] = broken["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_scaled_objects_follow_kedas_spec_and_a_wrong_one_is_refused() -> None:
    schema = scaled_object_schema()
    objects = of_kind("ScaledObject")
    assert len(objects) == 3
    for obj in objects:
        jsonschema.validate(obj, schema)
    broken = copy.deepcopy(objects[0])
    broken["spec"]["triggers"][0]["metadata"]["threshold"] = 5  # KEDA wants strings
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    misspelt = copy.deepcopy(objects[0])
    misspelt["spec"]["maxReplicas"] = 3  # an HPA field, not KEDA's
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(misspelt, schema)


def worker_groups() -> dict[str, set[int]]:
    """Worker Deployment name -> the buckets its ``--buckets`` serves."""
    groups = {}
    for deployment in of_kind("Deployment"):
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        if args[0] == "worker":
            buckets = args[args.index("--buckets") + 1]
            groups[deployment["metadata"]["name"]] = {int(b) for b in buckets.split(",")}
    return groups


def test_worker_groups_cover_every_bucket_once() -> None:
    groups = worker_groups()
    assert len(groups) == 3
    served = [b for buckets in groups.values() for b in buckets]
    assert sorted(served) == sorted(Settings().buckets)


def triggers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in obj["spec"]["triggers"]}


def test_each_group_scales_on_the_signals_of_its_own_buckets() -> None:
    groups = worker_groups()
    known = exported()
    targets = set()
    signals = {
        "queued-work": "headrace_dispatcher_queued_work_seconds",
        "busy-workers": "headrace_batch_compute_seconds_sum",
    }
    for obj in of_kind("ScaledObject"):
        target = obj["spec"]["scaleTargetRef"]["name"]
        targets.add(target)
        by_name = triggers(obj)
        assert set(by_name) == {*signals, "hourly-burst"}
        for name, series in signals.items():
            query = by_name[name]["metadata"]["query"]
            assert SERIES.findall(query) == [series] and series in known
            [regex] = re.findall(r'bucket=~"([^"]+)"', query)
            assert {int(b) for b in regex.split("|")} == groups[target], target
        cron = by_name["hourly-burst"]["metadata"]
        start, end = int(cron["start"].split()[0]), int(cron["end"].split()[0])
        assert start < 55 and end == 0  # warm before the five minutes before the hour
    assert targets == set(groups)


def test_the_gateway_scales_on_cpu_and_dispatchers_fit_the_partitions() -> None:
    [hpa] = of_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "headrace-gateway"
    assert {d["metadata"]["name"] for d in of_kind("Deployment")} >= {"headrace-gateway"}
    [config] = of_kind("ConfigMap")
    partitions = int(config["data"]["HEADRACE_REQUEST_PARTITIONS"])
    [dispatcher] = [d for d in of_kind("Deployment") if "dispatcher" in d["metadata"]["name"]]
    assert 1 < dispatcher["spec"]["replicas"] <= partitions  # an idle member holds nothing
    assert config["data"]["HEADRACE_BROKER_FLAVOR"] == "kafka"


def test_the_scaled_objects_deploy_the_policy_the_simulation_runs() -> None:
    """bench/scaling.py simulates headrace.ops.scaling.ScalingPolicy: it must be what KEDA
    and the HPA are told."""
    policy = ScalingPolicy()
    for obj in of_kind("ScaledObject"):
        spec = obj["spec"]
        trigger = triggers(obj)["queued-work"]
        busy = triggers(obj)["busy-workers"]
        assert float(busy["metadata"]["threshold"]) == policy.busy_target
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        [up] = behavior["scaleUp"]["policies"]
        [down] = behavior["scaleDown"]["policies"]
        assert float(trigger["metadata"]["threshold"]) == policy.threshold_s
        assert float(trigger["metadata"]["activationThreshold"]) == policy.activation_s
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (
            policy.min_workers,
            policy.max_workers,
        )
        assert spec["pollingInterval"] == policy.polling_s
        assert (up["type"], up["value"], up["periodSeconds"]) == (
            "Percent",
            policy.up_percent,
            policy.up_period_s,
        )
        assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] == policy.down_stabilization_s
        assert (down["type"], down["value"], down["periodSeconds"]) == (
            "Pods",
            policy.down_pods,
            policy.down_period_s,
        )


HARDENED = K8S / "hardened"


def _add(doc: dict[str, Any], path: str, value: Any) -> None:
    """JSON Patch ``add`` (RFC 6902), the only operation the hardened overlay uses: a new
    member, or ``-`` appended to a list. A member already there would be replaced, which here
    would drop what the base set: refused."""
    keys = [k.replace("~1", "/").replace("~0", "~") for k in path.split("/")[1:]]
    node: Any = doc
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if keys[-1] == "-":
        assert isinstance(node, list), f"{path}: no list to append to"
        node.append(copy.deepcopy(value))
        return
    assert isinstance(node, dict) and keys[-1] not in node, f"{path} is already set"
    node[keys[-1]] = copy.deepcopy(value)


def _selected(doc: dict[str, Any], target: dict[str, str]) -> bool:
    """A kustomize patch target: its kind, and its label selector (``k=v`` or ``k!=v``, the
    forms the overlay uses) on the object's own labels."""
    if doc["kind"] != target["kind"]:
        return False
    selector = target.get("labelSelector")
    if selector is None:
        return True
    labels = doc["metadata"].get("labels", {})
    if "!=" in selector:
        key, value = selector.split("!=")
        return bool(labels.get(key) != value)
    key, value = selector.split("=")
    return bool(labels.get(key) == value)


def hardened_documents() -> list[dict[str, Any]]:
    """infra/k8s/hardened built as kustomize builds it: the base, its own resources, and
    each patch applied to every object of its target kind."""
    kustomization = yaml.safe_load((HARDENED / "kustomization.yaml").read_text())
    assert kustomization["resources"][0] == "../"
    docs = copy.deepcopy(documents())
    for name in kustomization["resources"][1:]:
        docs += [d for d in yaml.safe_load_all((HARDENED / name).read_text()) if d is not None]
    for patch in kustomization["patches"]:
        operations = yaml.safe_load((HARDENED / patch["path"]).read_text())
        targets = [d for d in docs if _selected(d, patch["target"])]
        assert targets, patch
        for doc in targets:
            for operation in operations:
                assert operation["op"] == "add"
                _add(doc, operation["path"], operation["value"])
    return docs


def test_the_hardened_overlay_locks_every_container_and_passes_the_api_schema_strictly() -> None:
    docs = hardened_documents()
    for doc in docs:
        if not doc["apiVersion"].startswith(("keda.sh/", "kustomize.config.k8s.io/")):
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    pods = [d for d in docs if d["kind"] in ("Deployment", "Job")]
    assert len(pods) == 7  # six Deployments and the init Job
    for doc in pods:
        spec = doc["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        [container] = spec["containers"]  # the patch locks container 0: the only one
        locked = container["securityContext"]
        assert locked["readOnlyRootFilesystem"] is True
        assert locked["allowPrivilegeEscalation"] is False
        assert locked["capabilities"] == {"drop": ["ALL"]}
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/home/headrace/.headrace"} <= mounts  # scratch and state writable
        assert {m["name"] for m in container["volumeMounts"]} == {
            v["name"] for v in spec["volumes"]
        }
    [gateway] = [d for d in pods if d["metadata"]["name"] == "headrace-gateway"]
    [container] = gateway["spec"]["template"]["spec"]["containers"]
    assert "/var/lib/headrace/shared" in {m["mountPath"] for m in container["volumeMounts"]}


def test_gateway_replicas_share_files_and_spools_on_a_read_write_many_volume() -> None:
    """Every replica mounts one ReadWriteMany claim where the settings put files and job
    spools (tests/gateway/test_replicas.py runs two gateways on one such folder)."""
    [gateway] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "headrace-gateway"]
    assert gateway["spec"]["replicas"] > 1
    pod = gateway["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    shared = env["HEADRACE_SHARED_STATE_DIR"]
    assert Settings(shared_state_dir=shared).shared_dir.as_posix() == shared
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == shared]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    claims = {c["metadata"]["name"]: c for c in of_kind("PersistentVolumeClaim")}
    claim = claims[volume["persistentVolumeClaim"]["claimName"]]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]


def test_the_hardened_network_policies_deny_by_default_and_open_only_what_exists() -> None:
    docs = hardened_documents()
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    deny = policies.pop("headrace-default-deny-ingress")
    assert deny["podSelector"] == {} and "ingress" not in deny  # every pod, nothing in
    labels = [
        d["spec"]["template"]["metadata"]["labels"] for d in docs if d["kind"] == "Deployment"
    ]
    assert all(label.get("app.kubernetes.io/part-of") == "headrace" for label in labels)
    ports = {
        p["containerPort"]
        for d in docs
        if d["kind"] == "Deployment"
        for p in d["spec"]["template"]["spec"]["containers"][0].get("ports", [])
    }
    for name, spec in policies.items():
        selector = spec["podSelector"]["matchLabels"]
        assert any(selector.items() <= label.items() for label in labels), name
        for rule in spec["ingress"]:
            assert {p["port"] for p in rule["ports"]} <= ports, name
