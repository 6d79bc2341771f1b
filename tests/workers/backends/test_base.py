"""What every backend does when it places its model: fp16 on CUDA, fp32 on CPU, and the
attention kernels chosen on purpose (cuDNN's SDPA off on CUDA, where it builds a plan for
every new shape). The CUDA branch runs here on a model that stays where it is: the choice is
a process-wide switch, which a CPU build of torch holds too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from headrace.workers.backends.base import choose_attention_kernels, place_on_device


@pytest.fixture
def cudnn_sdp() -> Iterator[None]:
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


class _Stays(torch.nn.Linear):
    """A model that records where it was asked to go, and stays on the CPU."""

    asked: tuple[Any, ...] = ()

    def to(self, *args: Any, **kwargs: Any) -> _Stays:  # type: ignore[override]
        self.asked = (*args, kwargs.get("dtype"))
        return self


@pytest.mark.usefixtures("cudnn_sdp")
def test_placing_a_model_on_cuda_turns_cudnn_attention_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 1234)
    model, weights = place_on_device(_Stays(2, 2), torch.device("cuda"))
    assert model.asked == (torch.device("cuda"), torch.float16) and weights == 1234
    assert not torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.usefixtures("cudnn_sdp")
def test_on_cpu_the_model_is_fp32_and_the_cuda_switch_is_left_alone() -> None:
    model, weights = place_on_device(_Stays(2, 2), torch.device("cpu"))
    assert model.asked == (torch.device("cpu"), torch.float32) and weights == 0
    assert torch.backends.cuda.cudnn_sdp_enabled()
    choose_attention_kernels(torch.device("cuda"))
    assert not torch.backends.cuda.cudnn_sdp_enabled()
