"""The registry's rows on SQLite and PostgreSQL: versions are immutable, a version that
serves cannot be removed, a policy change applies only to the revision it read (one of two
writers wins), warm-up figures are kept from the first worker per device, and a store that
was never written reads as empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.models.catalog import ModelCatalog
from headrace.models.manifest import describe
from headrace.models.traffic import Shadow, TrafficPolicy
from headrace.schemas.errors import VersionConflictError
from headrace.schemas.manifest import ModelManifest, Warmed, WarmUpShape
from tests.models.copies import minilm_copy


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> ModelManifest:
    folder = minilm_copy(tmp_path_factory.mktemp("minilm") / "model")
    return describe(folder, name="enc", version="v1", source=str(folder))


def add(catalog: ModelCatalog, manifest: ModelManifest, version: str) -> None:
    catalog.add(
        manifest.model_copy(update={"version": version}),
        backend="auto",
        pooling="mean",
        normalize=True,
    )


def test_versions_are_registered_once_and_read_back(
    store_url: str, manifest: ModelManifest
) -> None:
    catalog = ModelCatalog.for_writing(store_url)
    add(catalog, manifest, "v1")
    add(catalog, manifest, "v2")
    with pytest.raises(VersionConflictError, match="enc:v1 is registered already"):
        add(catalog, manifest, "v1")
    record = catalog.get("enc", "v1")
    assert record is not None and record.manifest == manifest
    assert [r.version for r in catalog.versions("enc")] == ["v1", "v2"]
    assert catalog.get("enc", "v9") is None
    assert catalog.serving_version("enc") == "v1"  # the first registered, until a policy
    assert catalog.serving_version("other") is None


def test_a_policy_change_applies_to_the_revision_it_read(
    store_url: str, manifest: ModelManifest
) -> None:
    catalog = ModelCatalog.for_writing(store_url)
    add(catalog, manifest, "v1")
    add(catalog, manifest, "v2")
    assert catalog.policy("enc") == (None, 0)
    first = TrafficPolicy(stable="v1", shadow=Shadow(version="v2"))
    assert catalog.set_policy("enc", first, expected_revision=0, action="deploy", actor="a") == 1
    assert catalog.set_policy("enc", first, expected_revision=0, action="deploy", actor="b") is None
    second = TrafficPolicy(stable="v2", previous_stable="v1")
    assert catalog.set_policy("enc", second, expected_revision=1, action="promote", actor="a") == 2
    # a writer still at revision 1 loses and sees revision 2
    assert catalog.set_policy("enc", first, expected_revision=1, action="x", actor="b") is None
    assert catalog.policy("enc") == (second, 2)
    assert catalog.serving_version("enc") == "v2"
    events = catalog.events("enc")
    assert [(e.revision, e.action, e.actor) for e in events] == [
        (2, "promote", "a"),
        (1, "deploy", "a"),
    ]


def test_a_version_that_serves_cannot_be_removed(store_url: str, manifest: ModelManifest) -> None:
    catalog = ModelCatalog.for_writing(store_url)
    add(catalog, manifest, "v1")
    add(catalog, manifest, "v2")
    catalog.set_policy(
        "enc",
        TrafficPolicy(stable="v1", shadow=Shadow(version="v2")),
        expected_revision=0,
        action="deploy",
        actor="t",
    )
    with pytest.raises(VersionConflictError, match="serves traffic"):
        catalog.remove("enc", "v2")
    catalog.set_policy(
        "enc", TrafficPolicy(stable="v1"), expected_revision=1, action="rollback", actor="t"
    )
    catalog.remove("enc", "v2")
    assert catalog.get("enc", "v2") is None
    with pytest.raises(LookupError):
        catalog.remove("enc", "v2")


def test_warm_up_figures_are_kept_from_the_first_worker_per_device(
    store_url: str, manifest: ModelManifest
) -> None:
    catalog = ModelCatalog.for_writing(store_url)
    add(catalog, manifest, "v1")

    def warmed(worker: str) -> Warmed:
        return Warmed(
            device="cpu",
            worker=worker,
            load_weights_s=1.5,
            build_s=0.1,
            warm_up_s=0.4,
            memory_kind="cpu_peak_rss",
            peak_bytes_per_bucket={16: 300_000_000},
            shapes=[WarmUpShape(bucket=16, length=12, rows=4)],
        )

    assert catalog.record_warm_up("enc", "v1", warmed("w1"))
    assert not catalog.record_warm_up("enc", "v1", warmed("w2"))
    kept = catalog.get("enc", "v1")
    assert kept is not None and kept.manifest.warmed["cpu"].worker == "w1"
    assert kept.manifest.warmed["cpu"].peak_bytes_per_bucket == {16: 300_000_000}


def test_a_store_never_written_reads_as_empty_without_being_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/absent/registry.db"
    catalog = ModelCatalog.for_reading(url)
    assert catalog.versions() == [] and catalog.policy("enc") == (None, 0)
    assert catalog.get("enc", "v1") is None and catalog.serving_version("enc") is None
    assert not (tmp_path / "absent").exists()
