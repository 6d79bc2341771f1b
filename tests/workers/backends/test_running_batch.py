"""The running batch keeps its rows, their cache and their mask in step: prefills of
different widths joining are left-padded to the wider; a cut keeps the rows asked for, in
order, and drops the leading columns no remaining row uses; caches whose layers cannot be
cut by row are refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from headrace.workers.backends.running_batch import (
    RunningBatch,
    Unsupported,
    check_layers,
    select,
)


def _prefill(rows: list[str], lengths: list[int]) -> tuple[SimpleNamespace, torch.Tensor]:
    """A plain cache whose row k holds keys k+1 (its values the negative) over its last
    ``lengths[k]`` columns, and the left-padded mask that says so."""
    width = max(lengths)
    keys = torch.zeros(len(rows), 1, width, 2)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for k, (name, length) in enumerate(zip(rows, lengths, strict=True)):
        keys[k, :, width - length :] = float(ord(name))
        mask[k, width - length :] = 1
    layer = DynamicLayer()
    layer.update(keys, -keys)
    return SimpleNamespace(layers=[layer]), mask


def _held(batch: RunningBatch[str]) -> list[str]:
    """Each row's name as its keys hold it, where its mask says it has columns."""
    keys = batch.cache.layers[0].keys
    assert batch.mask is not None and keys.shape[2] == batch.mask.shape[1]
    names = []
    for k in range(len(batch)):
        used = keys[k, 0, batch.mask[k].bool(), 0].unique().tolist()
        assert len(used) == 1
        names.append(chr(int(used[0])))
    return names


def test_rows_joining_are_left_padded_to_the_wider_and_kept_in_order() -> None:
    batch: RunningBatch[str] = RunningBatch()
    batch.add(*_prefill(["a", "b"], [3, 2]), ["a", "b"])
    batch.add(*_prefill(["c"], [5]), ["c"])
    assert batch.rows == ["a", "b", "c"] == _held(batch)
    assert batch.mask is not None and batch.mask.sum(dim=1).tolist() == [3, 2, 5]
    assert batch.mask.shape == (3, 5) and batch.next_mask(2).shape == (3, 7)


def test_a_cut_keeps_the_rows_asked_for_and_drops_columns_none_of_them_uses() -> None:
    batch: RunningBatch[str] = RunningBatch()
    batch.add(*_prefill(["a", "b", "c"], [6, 2, 3]), ["a", "b", "c"])
    batch.keep([1, 2])
    assert batch.rows == ["b", "c"] == _held(batch)
    assert batch.mask is not None and batch.mask.shape == (2, 3)  # a's leading columns gone
    batch.keep([])
    assert (batch.rows, batch.cache, batch.mask) == ([], None, None) and not batch


def test_select_keeps_a_prefills_rows_in_cache_and_mask_alike() -> None:
    cache, mask = _prefill(["a", "b", "c"], [1, 2, 3])
    kept = select(cache, mask, [2, 0])
    assert kept.sum(dim=1).tolist() == [3, 1]
    assert cache.layers[0].keys[:, 0, -1, 0].tolist() == [ord("c"), ord("a")]


def test_caches_that_cannot_be_cut_by_row_are_refused() -> None:
    sliding = SimpleNamespace(layers=[type("DynamicSlidingWindowLayer", (), {})()])
    with pytest.raises(Unsupported, match="DynamicSlidingWindowLayer"):
        check_layers(sliding)
    with pytest.raises(Unsupported):
        check_layers(SimpleNamespace())
    plain = SimpleNamespace(layers=[type("DynamicLayer", (), {})()])
    check_layers(plain)
