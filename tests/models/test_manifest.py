"""A model folder's manifest: what the model says of itself and every file's sha256; a folder
that differs from its manifest by one byte is named file by file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from headrace.models.chat_format import detect_chat_template, tools_refused
from headrace.models.manifest import (
    describe,
    detect_max_tokens,
    labels_of,
    verify,
    write_manifest,
)
from headrace.schemas.errors import ChecksumMismatchError, ModelSourceError
from headrace.schemas.manifest import MANIFEST_FILE, ModelManifest
from tests.models.copies import minilm_copy
from tests.models.scorers import LABELS, build_scorer


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return minilm_copy(tmp_path_factory.mktemp("minilm") / "model")


def test_describe_reads_the_model_and_hashes_every_file(folder: Path) -> None:
    m = describe(folder, name="enc", version="v1", source=str(folder))
    assert (m.task, m.architecture, m.model_type, m.dtype) == ("embed", "BertModel", "bert", "F32")
    assert m.max_tokens == 512 and m.parameters == 22_713_728
    weights = m.file("model.safetensors")
    assert weights is not None and weights.kind == "weights"
    assert weights.sha256 == hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert {f.path for f in m.files} >= {"config.json", "tokenizer.json", "1_Pooling/config.json"}
    assert m.file("tokenizer.json").kind == "tokenizer"  # type: ignore[union-attr]
    verify(m, folder)  # the folder it was made from passes


def test_one_changed_byte_is_refused_naming_the_file(folder: Path, tmp_path: Path) -> None:
    m = describe(folder, name="enc", version="v1", source=str(folder))
    copy = minilm_copy(tmp_path / "copy")
    weights = copy / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.seek(1_000_000)
        byte = handle.read(1)
        handle.seek(1_000_000)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ChecksumMismatchError, match=r"model.safetensors has sha256") as raised:
        verify(m, copy)
    assert raised.value.path == "model.safetensors"
    weights.write_bytes((folder / "model.safetensors").read_bytes())
    verify(m, copy)
    (copy / "vocab.txt").unlink()
    with pytest.raises(ChecksumMismatchError, match=r"vocab\.txt is missing"):
        verify(m, copy)


def test_a_folder_that_is_not_a_model_gets_a_clear_error(tmp_path: Path, folder: Path) -> None:
    with pytest.raises(ModelSourceError, match=r"no config\.json"):
        describe(tmp_path, name="x", version="v1", source="here")
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(ModelSourceError, match=r"no \.safetensors"):
        describe(tmp_path, name="x", version="v1", source="here")


def test_max_tokens_comes_from_the_config_capped_by_the_tokenizer(tmp_path: Path) -> None:
    config = {"max_position_embeddings": 4096}
    assert detect_max_tokens(config, tmp_path) == 4096
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 2048}))
    assert detect_max_tokens(config, tmp_path) == 2048
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 10**30}))
    assert detect_max_tokens(config, tmp_path) == 4096  # "no limit" is not a limit
    with pytest.raises(ModelSourceError, match="--max-tokens"):
        detect_max_tokens({}, tmp_path / "none")


def test_the_manifest_file_round_trips_and_is_not_listed_in_itself(
    folder: Path, tmp_path: Path
) -> None:
    m = describe(folder, name="enc", version="v1", source=str(folder), label="TEST")
    path = write_manifest(m, folder)
    try:
        assert ModelManifest.model_validate_json(path.read_text()) == m
        again = describe(folder, name="enc", version="v1", source=str(folder))
        assert MANIFEST_FILE not in {f.path for f in again.files}
    finally:
        path.unlink()


def test_a_manifest_validates_against_its_exported_json_schema(
    folder: Path, tmp_path: Path
) -> None:
    from headrace.schemas.export import export_schemas

    [path] = [p for p in export_schemas(tmp_path) if p.name == "model-manifest.v1.json"]
    schema = json.loads(path.read_text())
    m = describe(folder, name="enc", version="v1", source=str(folder))
    jsonschema.validate(json.loads(m.model_dump_json()), schema)
    broken = json.loads(m.model_dump_json())
    broken["files"][0]["sha256"] = "not-a-digest"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_a_sequence_classifier_is_a_reranker_with_one_label_else_a_classifier(
    tmp_path: Path,
) -> None:
    reranker = describe(build_scorer(tmp_path / "r"), name="r", version="v1", source="x")
    classifier = describe(build_scorer(tmp_path / "c", LABELS), name="c", version="v1", source="x")
    assert (reranker.task, classifier.task) == ("rerank", "classify")
    assert labels_of(json.loads((tmp_path / "c" / "config.json").read_text())) == list(LABELS)


def test_the_chat_template_and_its_tool_format_are_recorded(tmp_path: Path) -> None:
    folder = build_scorer(tmp_path / "m")
    assert detect_chat_template(folder) == "none"
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}"
    config_path.write_text(json.dumps(config))
    assert describe(folder, name="m", version="v1", source="x").chat_template == "plain"
    assert tools_refused("plain") and tools_refused("none") is None
    (folder / "chat_template.jinja").write_text("{% if tools %}{{ tools | tojson }}{% endif %}")
    assert detect_chat_template(folder) == "tools" and tools_refused("tools") is None
