"""transformers' feed-forward chunking, rebound to skip its check when chunking is off; any
other call still goes to transformers' own function (no model: plain tensors)."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from transformers import pytorch_utils

from headrace.workers.backends import chunking


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@pytest.fixture
def module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A transformers model module that imported the function, as BERT's does."""
    fake = types.ModuleType("transformers.models.fake_for_tests")
    fake.apply_chunking_to_forward = pytorch_utils.apply_chunking_to_forward  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    return fake


class Lazy(types.ModuleType):
    """A lazy package as transformers makes them: looking a name up imports something."""

    def __getattr__(self, name: str) -> object:
        raise ImportError(f"looking up {name} imported what this machine lacks")


def test_a_lazy_package_is_read_without_its_lookup(
    module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers.models.lazy_for_tests", Lazy("lazy"))
    assert chunking.skip_chunking_checks() >= 1
    with chunking.transformers_own():
        assert module.apply_chunking_to_forward is pytorch_utils.apply_chunking_to_forward


def test_a_model_module_is_rebound_once_and_computes_the_same(module: types.ModuleType) -> None:
    assert chunking.skip_chunking_checks() >= 1
    direct = module.apply_chunking_to_forward
    assert direct is not pytorch_utils.apply_chunking_to_forward
    assert chunking.skip_chunking_checks() == 0  # once is enough
    x = torch.arange(8.0).reshape(4, 2)
    assert torch.equal(direct(double, 0, 0, x), x * 2)  # chunking off: called directly
    assert torch.equal(direct(double, 2, 0, x), x * 2)  # chunked: transformers' own
    with pytest.raises(ValueError, match="multiple of the chunk size"):
        direct(double, 3, 0, x)  # transformers' own checks still hold where it chunks


def test_transformers_own_function_is_back_within_and_rebound_after(
    module: types.ModuleType,
) -> None:
    chunking.skip_chunking_checks()
    direct = module.apply_chunking_to_forward
    assert direct is not pytorch_utils.apply_chunking_to_forward
    with chunking.transformers_own():
        assert module.apply_chunking_to_forward is pytorch_utils.apply_chunking_to_forward
    assert module.apply_chunking_to_forward is direct
