"""Log probabilities in both decode modes: each generated token's under the model (checked
against a plain forward pass over the prompt and the tokens so far), its alternatives most
likely first, only for the rows that ask, and still one copy to the host per step."""

from __future__ import annotations

import pytest
import torch

from headrace.schemas.params import GenerateParams
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.backends.pieces import token_pieces
from headrace.workers.backends.sampling import choose_step

PROMPTS = ["The headrace", "Water leaves the river at the weir and runs"]


def reference(backend: GenerationBackend, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """[len(generated), vocab] log-softmax of the model's logits at each generated step."""
    ids = torch.tensor([prompt + generated])
    with torch.inference_mode():
        logits = backend._model(input_ids=ids).logits[0]
    steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(generated)]
    return torch.log_softmax(steps.float(), dim=-1)


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_each_tokens_logprob_is_the_models_with_its_alternatives(
    decoders: dict[str, GenerationBackend], mode: str
) -> None:
    backend = decoders[mode]
    items = backend.encode([*PROMPTS, "no logprobs here"], [False] * 3)
    params = [
        GenerateParams(max_tokens=8, temperature=0.0, logprobs=3),
        GenerateParams(max_tokens=8, temperature=1.0, seed=5, logprobs=0),
        GenerateParams(max_tokens=8),
    ]
    out = backend.generate(items, params)
    assert out[2].logprobs is None
    for item, p, generated in zip(items[:2], params, out[:2], strict=False):
        assert generated.logprobs is not None
        assert [lp.token_id for lp in generated.logprobs] == generated.token_ids
        expected = reference(backend, item.ids, generated.token_ids)
        for step, lp in enumerate(generated.logprobs):
            assert lp.logprob == pytest.approx(float(expected[step, lp.token_id]), abs=1e-3)
            assert len(lp.top) == p.logprobs
            values, ids = expected[step].topk(len(lp.top))
            assert [t for t, _ in lp.top] == ids.tolist()
            assert [v for _, v in lp.top] == pytest.approx(values.tolist(), abs=1e-3)
        if p.temperature == 0.0:  # greedy: the token is the most likely one
            assert all(lp.token_id == lp.top[0][0] for lp in generated.logprobs)


def test_the_logprobs_of_a_step_reach_the_host_with_its_tokens_in_one_copy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    params = [
        GenerateParams(logprobs=2),
        GenerateParams(),
        GenerateParams(logprobs=5),
        GenerateParams(temperature=1.0, seed=1),
    ]
    copies = []
    real_tolist = torch.Tensor.tolist

    def counted(self: torch.Tensor) -> object:
        copies.append(self.shape)
        return real_tolist(self)

    torch.Tensor.tolist = counted  # type: ignore[method-assign]
    try:
        chosen = choose_step(logits, logits, params, [1, 2, 3, 4], [0] * 4, [()] * 4, [0, 2])
    finally:
        torch.Tensor.tolist = real_tolist  # type: ignore[method-assign]
    assert len(copies) == 1
    log_p = torch.log_softmax(logits, dim=-1)
    assert chosen.tokens[:3] == logits[:3].argmax(-1).tolist()
    assert set(chosen.logprobs) == {0, 2}
    for row, k in ((0, 2), (2, 5)):
        got = chosen.logprobs[row]
        assert got.logprob == pytest.approx(float(log_p[row, chosen.tokens[row]]))
        assert [t for t, _ in got.top] == log_p[row].topk(k).indices.tolist()


def test_a_tokens_bytes_are_its_own_even_inside_a_character(
    decoders: dict[str, GenerationBackend],
) -> None:
    tokenizer = decoders["static"].tokenizer
    ids = tokenizer("mill €")["input_ids"]
    pieces = token_pieces(tokenizer, ids)
    assert b"".join(bytes(raw) for _, raw in pieces).decode() == "mill €"
    assert any(text == "\ufffd" for text, _ in pieces)  # € spans tokens: each shows U+FFFD
