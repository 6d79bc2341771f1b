"""Decode-step attention over chunks of rows, each from the first key column its rows use:
the same attention as SDPA over the whole width, and the same tokens through the continuous
decoder of the TEST MODEL."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from headrace.schemas.params import GenerateParams
from headrace.workers.backends import ragged_attention
from headrace.workers.backends.base import Generated
from tests.tiny_model import context_lm, load_test_lm


def test_chunks_cover_every_row_from_the_first_column_any_of_them_uses() -> None:
    assert ragged_attention.chunks([0, 5, 9, 7, 7, 12, 3], 3) == [(0, 3, 0), (3, 6, 7), (6, 7, 3)]


def _left_padded(first_used: list[int], width: int) -> torch.Tensor:
    columns = torch.arange(width)
    return torch.stack([columns >= f for f in first_used])[:, None, None, :]


def test_attention_over_chunks_equals_sdpa_over_the_whole_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ragged_attention, "CHUNK_ROWS", 8)
    torch.manual_seed(0)
    rows, heads, width, dim = 40, 4, 300, 16
    first_used = [int(f) for f in torch.randint(0, width - 1, (rows,))]
    mask = _left_padded(first_used, width)
    query = torch.randn(rows, heads, 1, dim)
    key, value = torch.randn(rows, heads, width, dim), torch.randn(rows, heads, width, dim)
    module = SimpleNamespace(is_causal=True)
    whole, _ = sdpa_attention_forward(module, query, key, value, mask)  # type: ignore[arg-type]
    chunked, _ = ragged_attention.ragged_sdpa(module, query, key, value, mask)  # type: ignore[arg-type]
    assert chunked.shape == whole.shape == (rows, 1, heads, dim)
    torch.testing.assert_close(chunked, whole)
    # and a wrong start (a used column dropped) would show
    dropped, _ = sdpa_attention_forward(
        module,  # type: ignore[arg-type]
        query[:8],
        key[:8, :, min(first_used[:8]) + 1 :],
        value[:8, :, min(first_used[:8]) + 1 :],
        mask[:8, :, :, min(first_used[:8]) + 1 :],
    )
    assert not torch.allclose(dropped, whole[:8])


def test_a_prefill_and_a_small_step_go_to_sdpa_unchanged() -> None:
    torch.manual_seed(1)
    module = SimpleNamespace(is_causal=True)
    query, key = torch.randn(4, 2, 3, 8), torch.randn(4, 2, 3, 8)
    expected, _ = sdpa_attention_forward(module, query, key, key, None)  # type: ignore[arg-type]
    got, _ = ragged_attention.ragged_sdpa(module, query, key, key, None)  # type: ignore[arg-type]
    torch.testing.assert_close(got, expected)


def test_a_step_given_the_prepared_mask_computes_what_the_two_dimensional_mask_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ragged_attention, "CHUNK_ROWS", 2)
    backend = load_test_lm(continuous_rows=8)
    try:
        model = backend._model
        assert model.config._attn_implementation == ragged_attention.NAME
        lengths = [3, 9, 5, 12, 1]  # left-padded to 12
        mask = torch.stack([torch.arange(12) >= 12 - n for n in lengths]).long()
        vocab = model.config.vocab_size
        ids = torch.randint(5, vocab, (5, 12), generator=torch.Generator().manual_seed(3))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            arg = backend._cache_arg  # what this transformers calls the cache argument
            cache = model(input_ids=ids, attention_mask=mask, position_ids=positions)[arg]
            step = torch.full((5, 1), 7)
            at = torch.tensor(lengths)[:, None]
            wide = torch.cat([mask, torch.ones_like(step)], dim=1)
            logits = [
                model(
                    input_ids=step,
                    attention_mask=m,
                    position_ids=at,
                    **{arg: copy.deepcopy(cache)},
                ).logits
                for m in (wide, ragged_attention.step_mask(wide), torch.ones_like(wide))
            ]
        assert ragged_attention.step_mask(wide).shape == (5, 1, 1, 13)
        torch.testing.assert_close(logits[1], logits[0])
        assert not torch.allclose(logits[2], logits[0])  # the mask matters: padding would show
    finally:
        backend.close()


def test_the_continuous_decoder_on_chunks_gives_each_row_its_tokens_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ragged_attention, "CHUNK_ROWS", 4)
    model_dir = context_lm(tmp_path)  # a row's tokens depend on its own cache rows
    static = load_test_lm(model_dir=model_dir)
    continuous = load_test_lm(continuous_rows=64, model_dir=model_dir)
    try:
        assert continuous._model.config._attn_implementation == ragged_attention.NAME
        assert static._model.config._attn_implementation == ragged_attention.NAME  # on CPU
        texts = [" the water runs" * (1 + i % 7) + f" to mill {i}" for i in range(24)]
        items = static.encode(texts, [False] * len(texts))
        params = [GenerateParams(max_tokens=96 if i % 6 == 0 else 12) for i in range(24)]
        alone = [static.generate([i], [p])[0] for i, p in zip(items, params, strict=True)]
        calls = []
        real = ragged_attention.chunks
        monkeypatch.setattr(
            ragged_attention, "chunks", lambda f, n: calls.append(len(f)) or real(f, n)
        )
        got: dict[int, list[Generated]] = {}

        def call(k: int) -> None:  # four callers of six rows, joining while others decode
            got[k] = continuous.generate(items[k * 6 : k * 6 + 6], params[k * 6 : k * 6 + 6])

        threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        together = [g for k in range(4) for g in got[k]]
        assert [g.token_ids for g in together] == [g.token_ids for g in alone]
        assert calls and max(calls) > 4  # steps of more rows than a chunk ran in chunks
    finally:
        continuous.close()
