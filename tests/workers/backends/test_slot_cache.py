"""The continuous decoder's rows on fixed slots (``slot_cache.py``), the layout whose decode
steps a GPU replays as CUDA graphs (``decode_graphs.py``), run eagerly on the TEST MODEL's
context-sensitive build: rows get what static batching gives them, also when they wait for a
slot another row left; a bucket's step is the same kernels on the same shapes every time and
reads nothing back to the host (what a CUDA graph needs: a recording replays exactly what it
recorded); a recorded step replayed gives the same tokens, and a recording that fails leaves
every step eager."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from headrace.schemas.params import GenerateParams
from headrace.workers.backends.base import EncodedItem, Generated, default_shapes
from headrace.workers.backends.decode_graphs import StepGraphs
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.backends.slot_cache import SlotBatch, bucket, slots_fitting
from tests.tiny_model import context_lm, load_test_lm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return context_lm(tmp_path_factory.mktemp("lm"))


@pytest.fixture(scope="module")
def static(model_dir: Any) -> GenerationBackend:
    return load_test_lm(model_dir=model_dir)


@pytest.fixture
def on_slots(model_dir: Any) -> Iterator[Callable[[int], GenerationBackend]]:
    made: list[GenerationBackend] = []

    def make(rows: int) -> GenerationBackend:
        made.append(load_test_lm(continuous_rows=rows, model_dir=model_dir, slots=True))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


def _slots(backend: GenerationBackend) -> SlotBatch:
    assert backend.slot_batch is not None
    return backend.slot_batch


def _work(backend: GenerationBackend, count: int) -> tuple[list[EncodedItem], list[Any]]:
    texts = [" the water runs" * (1 + i % 7) + f" to mill {i}" for i in range(count)]
    params = [
        GenerateParams(
            max_tokens=96 if i % 10 == 0 else 12 + i % 5,
            temperature=0.0 if i % 3 else 0.9,
            seed=i,
        )
        for i in range(count)
    ]
    return backend.encode(texts, [False] * count), params


def _together(
    backend: GenerationBackend, items: list[EncodedItem], params: list[Any], callers: int
) -> list[Generated]:
    """``callers`` threads hand their share of the rows in at once; the rows in order."""
    share = len(items) // callers
    got: dict[int, list[Generated]] = {}

    def call(k: int) -> None:
        got[k] = backend.generate(
            items[k * share : (k + 1) * share], params[k * share : (k + 1) * share]
        )

    threads = [threading.Thread(target=call, args=(k,)) for k in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return [g for k in range(callers) for g in got[k]]


def _alone(
    static: GenerationBackend, items: list[EncodedItem], params: list[Any]
) -> list[list[int]]:
    return [static.generate([i], [p])[0].token_ids for i, p in zip(items, params, strict=True)]


def _decodes_as_alone(
    static: GenerationBackend, backend: GenerationBackend, count: int, callers: int
) -> None:
    """``count`` rows from ``callers`` threads at once on ``backend`` get, token for token,
    what static decoding gives each alone."""
    items, params = _work(static, count)
    together = _together(backend, items, params, callers)
    assert [g.token_ids for g in together] == _alone(static, items, params)


def test_buckets_are_powers_of_two_within_their_bound() -> None:
    assert [bucket(n, 256) for n in (1, 8, 9, 16, 17, 200, 256)] == [8, 8, 16, 16, 32, 256, 256]
    assert bucket(300, 100) == 100


def test_a_slot_costs_its_keys_and_values_and_its_logits_working_memory() -> None:
    """On a GPU the slots are bounded by 90% of free memory; each costs its row's KV at full
    context and its logits as a step and the sampler hold them (the buffer, the graphs'
    pool, five float32/int64 [rows, vocabulary] tensors of top-p: 24 bytes an entry)."""
    gib = 1 << 30
    medium_kv = 2 * 24 * 1024 * 2  # GPT-2 medium, fp16: keys and values, 24 layers
    logits = 50_257 * (2 * 2 + 24)  # ~1.4 MB a row, against ~100 MB of KV at 1,024 columns
    assert slots_fitting(10 * gib, medium_kv, 1024, 50_257, 2) == int(10 * gib * 0.9) // (
        medium_kv * 1024 + logits
    )
    assert slots_fitting(10 * gib, medium_kv, 1024, 50_257, 2) == 94  # 96 on KV alone
    # a small model with a large vocabulary: its logits, not its KV, bound the slots
    assert slots_fitting(gib, 64, 64, 50_257, 4) == int(gib * 0.9) // (64 * 64 + 50_257 * 32)
    assert slots_fitting(gib, 64, 64, 50_257, 4) < 600 < int(gib * 0.9) // (64 * 64)


def test_rows_of_many_callers_on_slots_get_what_static_batching_gives_them(
    static: GenerationBackend, on_slots: Callable[[int], GenerationBackend]
) -> None:
    backend = on_slots(64)
    _decodes_as_alone(static, backend, 30, callers=6)
    assert backend.decoder is not None and backend.decoder.most_rows > 5


def test_rows_waiting_for_a_slot_take_the_ones_left_and_keep_their_tokens(
    static: GenerationBackend, on_slots: Callable[[int], GenerationBackend]
) -> None:
    # 8 slots for 24 rows: most wait, and decode in slots whose earlier rows were longer (their
    # keys are still in the columns past the new prompt: masked, never read)
    backend = on_slots(8)
    _decodes_as_alone(static, backend, 24, callers=4)
    decoder = backend.decoder
    assert decoder is not None and decoder.most_rows <= 8
    assert _slots(backend).capacity == 8 and _slots(backend).free == 8  # every slot given back


def test_the_kv_room_bounds_the_slots_before_they_are_allocated(
    static: GenerationBackend, on_slots: Callable[[int], GenerationBackend]
) -> None:
    backend = on_slots(64)
    slots, decoder = _slots(backend), backend.decoder
    assert decoder is not None
    # a worker warms up, then gives the loop its plan's room (made from what the warm-up
    # measured): the warm-up decodes statically, the slots are not allocated yet
    backend.warm_up(default_shapes([16, 64], rows=2))
    assert slots.cache is None
    decoder.kv_tokens = 5 * slots.width + 1  # the memory plan's room: five rows at full width
    _decodes_as_alone(static, backend, 12, callers=3)
    assert slots.capacity == 5 and decoder.most_rows <= 5
    assert slots.token_bytes == 2 * 2 * 4 * 16 * 4  # k and v, 2 layers, 4 heads of 16, fp32


class _Ops(TorchDispatchMode):
    """Every aten call of a step: its name, and its arguments' shapes, dtypes and plain values
    (a value worked out from the step's state would differ from one step to the next)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls.append((str(func), _described((args, kwargs or {}))))
        return func(*args, **(kwargs or {}))


def _described(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(_described(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _described(v)) for k, v in sorted(value.items()))
    return repr(value)


def test_a_buckets_step_is_the_same_calls_every_time_and_reads_nothing_back(
    static: GenerationBackend, on_slots: Callable[[int], GenerationBackend]
) -> None:
    # what a CUDA graph replays is what it recorded: a step whose calls, shapes or plain
    # arguments changed with the step's state, or that read a value back to the host (an
    # ``item``: aten's _local_scalar_dense) or made a tensor from host data (lift_fresh),
    # would replay wrong or fail to record
    backend = on_slots(16)
    slots = _slots(backend)
    seen: dict[tuple[int, int], list[list[tuple[str, Any]]]] = {}

    def recorded(rows: int, columns: int, step: Callable[[], torch.Tensor]) -> torch.Tensor:
        with _Ops() as ops:
            out = step()
        seen.setdefault((rows, columns), []).append(ops.calls)
        return out

    slots.runner = recorded
    _decodes_as_alone(static, backend, 12, callers=3)
    counts = {b: len(steps) for b, steps in seen.items()}
    assert sum(n >= 5 for n in counts.values()) >= 2, counts
    for steps in seen.values():
        assert all(calls == steps[0] for calls in steps)
        names = Counter(name for name, _ in steps[0])
        assert not [n for n in names if "_local_scalar_dense" in n or "lift_fresh" in n], names
        assert names["aten.index_put_.default"] >= 2  # every layer writes its column in place


class _Replayed:
    """A CPU stand-in for a CUDA graph: recording runs the step once; a replay runs the
    recorded step again into the same output tensor, as a graph replays into its memory."""

    recorded = 0

    def __init__(self, step: Callable[[], torch.Tensor]) -> None:
        self.step = step
        self.out = step()
        _Replayed.recorded += 1

    def replay(self) -> None:
        self.out.copy_(self.step())


def test_each_bucket_is_recorded_once_and_replayed_with_the_same_tokens(
    static: GenerationBackend, on_slots: Callable[[int], GenerationBackend]
) -> None:
    backend = on_slots(16)
    slots, graphs = _slots(backend), StepGraphs(lambda step: _from(_Replayed(step)))
    slots.runner = graphs.run
    _Replayed.recorded = 0
    _decodes_as_alone(static, backend, 12, callers=3)
    assert graphs.captured == _Replayed.recorded >= 2 and graphs.failed is None
    assert backend.decoder is not None and backend.decoder.steps > 3 * graphs.captured


def _from(replayed: _Replayed) -> tuple[_Replayed, torch.Tensor]:
    return replayed, replayed.out


def test_a_recording_that_fails_leaves_every_step_eager_and_right(
    static: GenerationBackend, on_slots: Callable[[int], GenerationBackend]
) -> None:
    backend = on_slots(16)
    tries: list[int] = []

    def broken(step: Callable[[], torch.Tensor]) -> Any:
        tries.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")

    graphs = StepGraphs(broken)
    _slots(backend).runner = graphs.run
    _decodes_as_alone(static, backend, 6, callers=2)
    assert graphs.failed is not None and "capturing" in graphs.failed
    assert len(tries) == 1 and graphs.captured == 0  # tried once, not at every bucket


def test_a_full_loop_lets_rows_in_a_quarter_at_a_time_not_one_by_one(
    static: GenerationBackend, on_slots: Callable[[int], GenerationBackend]
) -> None:
    # on slots a finished row's slot is free at once: with a backlog and the cadence not due,
    # a row joining alone into a full loop would be a prefill pass for one row at every step
    # (a GPU's prefill costs several recorded steps); they wait until a quarter can join
    backend = on_slots(8)
    decoder = backend.decoder
    assert decoder is not None
    joins: list[tuple[int, int]] = []  # (rows joining, rows running)
    real = decoder._join

    def join(joining: list[Any]) -> None:
        joins.append((len(joining), len(_slots(backend))))
        real(joining)

    decoder._join = join  # type: ignore[method-assign]
    decoder.cadence.steps_between_joins = lambda: 10_000  # type: ignore[method-assign]
    _decodes_as_alone(static, backend, 32, callers=4)
    later = [(j, r) for j, r in joins if r]  # the loop was not empty
    assert later and all(j * 4 >= r for j, r in later), joins
