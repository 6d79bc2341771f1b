"""The roomy cache layer: what it holds is what DynamicLayer's concatenation holds, through
steps that fit in its room and steps that outgrow it; stacked parts are right-aligned."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from headrace.workers.backends.kv_room import ROOM, RoomyLayer, stacked


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
    assert out.shape == (3, 1, 5, 1)
    assert out[:, 0, :, 0].tolist() == [
        [0, 0, 1, 1, 0],
        [0, 2, 2, 2, 0],
        [0, 2, 2, 2, 0],
    ]
