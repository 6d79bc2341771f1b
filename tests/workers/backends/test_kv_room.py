"""The roomy cache layer: what it holds is what DynamicLayer's concatenation holds, through
steps that fit in its room and steps that outgrow it; stacked parts are right-aligned; rows
joining go into the spare rows when they fit, and into new buffers when they do not; rows
leaving are replaced by the last rows and leading columns dropped, without a copy of the
cache."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers.cache_utils import DynamicLayer

from headrace.workers.backends.kv_room import (
    ROOM,
    ROW_ROOM,
    RoomyLayer,
    drop_columns,
    join,
    keep_rows,
    select_rows,
    stacked,
)


def test_steps_in_place_and_past_the_room_hold_what_concatenation_holds() -> None:
    torch.manual_seed(0)
    start = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    plain = DynamicLayer()
    plain.update(*start)
    roomy = RoomyLayer(*start)
    buffer = roomy._keys
    for step in range(ROOM + 10):  # past the first room: the buffers grow once
        new = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        want, got = plain.update(*new), roomy.update(*new)
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
        if step < ROOM:
            assert roomy._keys is buffer  # written in place
    assert roomy._keys is not buffer and roomy.get_seq_length() == 5 + ROOM + 10


def test_stacked_right_aligns_each_part_with_zeros_before_and_room_after() -> None:
    a, b = torch.ones(1, 1, 2, 1), torch.full((2, 1, 3, 1), 2.0)
    out = stacked([a, b], width=4, room=1)
    assert out.shape == (3 + ROW_ROOM, 1, 5, 1)  # spare rows and room: not initialised
    assert out[:3, 0, :4, 0].tolist() == [
        [0, 0, 1, 1],
        [0, 2, 2, 2],
        [0, 2, 2, 2],
    ]


def _cache(*layers: RoomyLayer | DynamicLayer) -> SimpleNamespace:
    return SimpleNamespace(layers=list(layers))


def _plain(keys: torch.Tensor) -> DynamicLayer:
    layer = DynamicLayer()
    layer.update(keys, -keys)
    return layer


def test_rows_joining_no_wider_than_the_batch_are_written_into_its_spare_rows() -> None:
    torch.manual_seed(1)
    running = _cache(RoomyLayer(torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4)))
    layer = running.layers[0]
    before, buffer = layer.keys.clone(), layer._keys
    joining = torch.randn(2, 2, 4, 4)
    join(running, _cache(_plain(joining)), width=6)
    assert layer._keys is buffer  # in place: the running rows were not copied
    assert layer.keys.shape == (5, 2, 6, 4)
    assert torch.equal(layer.keys[:3], before)
    assert torch.equal(layer.keys[3:, :, 2:], joining)
    assert torch.equal(layer.values[3:, :, 2:], -joining)
    assert not layer.keys[3:, :, :2].any() and not layer.values[3:, :, :2].any()
    step = torch.randn(5, 2, 1, 4)
    keys, _ = layer.update(step, step)  # the next step writes every row's column
    assert keys.shape == (5, 2, 7, 4) and torch.equal(keys[:, :, 6:], step)


def test_rows_wider_than_the_batch_or_past_its_spare_rows_get_new_buffers() -> None:
    torch.manual_seed(2)
    running = _cache(RoomyLayer(torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4)))
    layer = running.layers[0]
    before, buffer = layer.keys.clone(), layer._keys
    wider = torch.randn(1, 2, 8, 4)
    join(running, _cache(_plain(wider)), width=8)
    assert layer._keys is not buffer and layer.keys.shape == (4, 2, 8, 4)
    assert torch.equal(layer.keys[:3, :, 2:], before) and not layer.keys[:3, :, :2].any()
    assert torch.equal(layer.keys[3:], wider)
    many = torch.randn(layer._keys.shape[0], 2, 8, 4)  # more than the spare rows
    buffer = layer._keys
    join(running, _cache(_plain(many)), width=8)
    assert layer._keys is not buffer and layer.keys.shape[0] == 4 + many.shape[0]
    assert torch.equal(layer.keys[4:], many)


def test_rows_leaving_make_those_below_move_up_and_columns_drop_without_a_copy() -> None:
    torch.manual_seed(3)
    keys = torch.randn(6, 2, 5, 4)
    cache = _cache(RoomyLayer(keys, -keys), RoomyLayer(2 * keys, keys))
    buffers = [layer._keys for layer in cache.layers]
    keep = [0, 2, 4, 5]  # rows 1 and 3 leave
    keep_rows(cache, keep)
    first, second = cache.layers
    assert [layer._keys for layer in cache.layers] == buffers  # in place
    assert torch.equal(first.keys, keys[keep]) and torch.equal(first.values, -keys[keep])
    assert torch.equal(second.keys, 2 * keys[keep])
    keep_rows(cache, [0, 1])  # the last rows leave: nothing moves
    assert torch.equal(first.keys, keys[[0, 2]])
    drop_columns(cache, 2)
    assert first._keys is buffers[0] and torch.equal(first.keys, keys[[0, 2]][:, :, 2:])
    step = torch.randn(2, 2, 1, 4)
    got, _ = first.update(step, step)  # a step after both: the column lands after the rest
    assert torch.equal(got, torch.cat([keys[[0, 2]][:, :, 2:], step], dim=2))
    for _ in range(ROOM + 3):  # past the room: rebuilt from the view, start and all
        got, _ = first.update(step, step)
    assert first._keys is not buffers[0] and got.shape == (2, 2, 3 + 1 + ROOM + 3, 4)
    assert torch.equal(got[:, :, :3], keys[[0, 2]][:, :, 2:])


def test_select_rows_keeps_the_rows_asked_for_in_order_in_every_layer() -> None:
    rows = torch.arange(4.0).view(4, 1, 1, 1).expand(4, 2, 3, 2).contiguous()
    layers = [DynamicLayer(), DynamicLayer()]
    for depth, layer in enumerate(layers):
        layer.update(rows + 10 * depth, -(rows + 10 * depth))
    cache = SimpleNamespace(layers=layers)
    select_rows(cache, [1, 3])
    for depth, layer in enumerate(layers):
        assert layer.keys[:, 0, 0, 0].tolist() == [1 + 10 * depth, 3 + 10 * depth]
        assert layer.values[:, 0, 0, 0].tolist() == [-1 - 10 * depth, -3 - 10 * depth]
