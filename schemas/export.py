"""JSON Schema export, so a client in any language can produce requests and read replies."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from headrace.schemas.cache import Invalidation
from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.manifest import ModelManifest
from headrace.schemas.messages import Reply, Request, StreamDelta

PUBLIC_MESSAGES: dict[str, type[BaseModel]] = {
    "request": Request,
    "reply": Reply,
    "stream-delta": StreamDelta,
    "dead-letter": DeadLetter,
    "invalidation": Invalidation,
    "model-manifest": ModelManifest,  # not a message: the file a registered version carries
}


def export_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in PUBLIC_MESSAGES.items():
        schema = model.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"headrace/{name}.v1.json"
        path = directory / f"{name}.v1.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
