"""Choosing every row's token on the device (``sampling.choose_tokens``), and the guard that a
decode step waits for the device at most once: the static and the continuous decoder are run
under a torch function mode that counts every call that copies a tensor's values to the host
(``item``, ``tolist``, ``cpu``, ``numpy``, ``int()``/``bool()`` of a tensor). On CPU no
copy happens, but the calls are the same ones that wait for a GPU."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from headrace.schemas.params import GenerateParams
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.backends.sampling import adjust, choose_tokens
from tests.tiny_model import load_test_lm

HOST_COPIES = ("item", "tolist", "cpu", "numpy", "__int__", "__bool__", "__float__", "__index__")


@pytest.fixture
def host_copies(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts calls of the methods in ``HOST_COPIES`` on any thread (the continuous decoder
    runs on its own; torch function modes are per thread), by name."""
    calls: Counter[str] = Counter()
    for name in HOST_COPIES:
        method = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _m: Any = method, _n: str = name) -> Any:
            calls[_n] += 1
            return _m(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls


def test_greedy_rows_take_the_argmax_and_a_tiny_top_p_is_greedy() -> None:
    logits = torch.tensor([[0.1, 2.0, 1.9, -1.0], [3.0, 0.0, 0.0, 0.0]])
    nucleus = GenerateParams(temperature=1.0, top_p=1e-6)
    for step in range(20):
        chosen = choose_tokens(logits, [nucleus, GenerateParams()], [7, 8], [step, step])
        assert chosen.tolist() == [1, 0]


def test_a_row_draws_the_same_tokens_whatever_its_batch_mates() -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 50)
    hot = [GenerateParams(temperature=1.2, top_p=0.9) for _ in range(5)]
    mixed = [hot[0], GenerateParams(), hot[2], GenerateParams(temperature=0.5), hot[4]]
    seeds = [100, 101, 102, 103, 104]

    def draws(params: list[GenerateParams], rows: list[int]) -> list[list[int]]:
        return [
            choose_tokens(
                logits[rows], params, [seeds[r] for r in rows], [step] * len(rows)
            ).tolist()
            for step in range(30)
        ]

    together = draws(hot, [0, 1, 2, 3, 4])
    alone = draws([hot[2]], [2])
    assert [step[2] for step in together] == [step[0] for step in alone]
    assert [step[2] for step in draws(mixed, [0, 1, 2, 3, 4])] == [step[0] for step in alone]
    assert len({step[2] for step in together}) > 1  # it samples: not always the argmax
    assert [s[1] for s in together] != [s[2] for s in together]  # seeds differ, draws differ


def test_draws_follow_the_distribution() -> None:
    n = 4000  # drawn as one batch of n rows: the same draws as n steps of one row

    def draws(top_p: float, seeds: list[int], steps: list[int]) -> Counter[int]:
        logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 1e-9]])).expand(len(seeds), 4)
        params = [GenerateParams(temperature=1.0, top_p=top_p)] * len(seeds)
        return Counter(choose_tokens(logits, params, seeds, steps).tolist())

    over_steps = draws(1.0, [3] * n, list(range(n)))
    over_seeds = draws(1.0, list(range(n)), [0] * n)
    for counts in (over_steps, over_seeds):
        assert counts[3] == 0
        for token, p in ((0, 0.5), (1, 0.3), (2, 0.2)):
            assert abs(counts[token] / n - p) < 0.03, counts
    assert set(draws(0.6, [5] * 300, list(range(300)))) == {0, 1}  # top_p keeps 0 and 1


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, GenerationBackend]]:
    made = {
        "static": load_test_lm(),
        "continuous": load_test_lm(continuous_rows=64),
        "slots": load_test_lm(continuous_rows=64, slots=True),  # a GPU's layout
    }
    yield made
    for backend in made.values():
        backend.close()


@pytest.mark.parametrize("mode", ["static", "continuous", "slots"])
def test_a_decode_step_copies_to_the_host_once(
    backends: dict[str, GenerationBackend], mode: str, host_copies: Counter[str]
) -> None:
    backend = backends[mode]
    texts = [" the water runs" * (1 + i % 5) for i in range(12)]
    items = backend.encode(texts, [False] * len(texts))
    params = [
        GenerateParams(max_tokens=24, temperature=0.0 if i % 2 else 0.8, top_p=0.9, seed=i)
        for i in range(len(texts))
    ]
    decoder = backend.decoder
    steps_before = decoder.steps if decoder is not None else 0
    host_copies.clear()
    out = backend.generate(items, params)
    copies = sum(host_copies.values())
    assert sum(o.completion_tokens for o in out) > 3 * len(texts)  # several steps
    if decoder is not None:  # the loop's thread: one prefill, then its steps
        passes = decoder.steps - steps_before + 1
    else:
        passes = max(o.completion_tokens for o in out)
    assert passes > 3
    # one per pass, and a prefill's 2D mask is asked once whether it is all ones (these
    # prompts prefill in at most two groups); before: one per row per step, and the mask's
    # question at every step
    assert copies <= passes + 2, (copies, passes, dict(host_copies))
    assert host_copies["tolist"] <= passes


def test_logit_bias_and_penalties_move_only_the_rows_that_ask() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0, 0.5], [0.0, 2.0, 1.0, 0.5], [0.0, 2.0, 1.0, 0.5]])
    banned = GenerateParams(logit_bias={"1": -100, "3": 5.0})
    repeats = GenerateParams(frequency_penalty=0.6, presence_penalty=0.5)
    out = adjust(logits, [banned, GenerateParams(), repeats], [[], [1, 1], [1, 1, 2]])
    assert out[0].tolist() == [0.0, -98.0, 1.0, 5.5]
    assert out[1].tolist() == logits[1].tolist()  # asks for nothing: untouched
    # token 1 twice: 2.0 - 2 * 0.6 - 0.5; token 2 once: 1.0 - 0.6 - 0.5
    assert out[2].tolist() == pytest.approx([0.0, 0.3, -0.1, 0.5])
    assert adjust(logits, [GenerateParams()] * 3, [[], [], []]) is logits  # nothing to do
    chosen = choose_tokens(
        logits, [banned, GenerateParams(), repeats], [1, 2, 3], [0, 2, 3], [[], [1, 1], [1, 1, 2]]
    )
    assert chosen.tolist() == [3, 1, 3]
    assert GenerateParams(logit_bias={"9": 1.0, "10": 2.0}).logit_bias == ((9, 1.0), (10, 2.0))


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_a_banned_token_never_comes_and_a_forced_one_always_does(
    backends: dict[str, GenerationBackend], mode: str
) -> None:
    backend = backends[mode]
    items = backend.encode([" the water runs to the wheel"] * 2, [False, False])
    [free] = backend.generate(items[:1], [GenerateParams(max_tokens=12)])
    assert free.token_ids, free
    favourite = Counter(free.token_ids).most_common(1)[0][0]
    banned = GenerateParams(max_tokens=12, logit_bias={str(favourite): -100})
    forced = GenerateParams(max_tokens=6, logit_bias={str(favourite): 100})
    without, only = backend.generate(items, [banned, forced])
    assert favourite not in without.token_ids and without.token_ids
    assert set(only.token_ids) == {favourite} and len(only.token_ids) == 6


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_a_frequency_penalty_makes_greedy_text_repeat_less(
    backends: dict[str, GenerationBackend], mode: str
) -> None:
    backend = backends[mode]
    items = backend.encode([" the wheel turns"] * 2, [False, False])
    plain, penalized = backend.generate(
        items, [GenerateParams(max_tokens=24), GenerateParams(max_tokens=24, frequency_penalty=2.0)]
    )

    def most_repeated(ids: list[int]) -> int:
        return Counter(ids).most_common(1)[0][1]

    assert most_repeated(penalized.token_ids) < most_repeated(plain.token_ids), (
        plain.token_ids,
        penalized.token_ids,
    )
