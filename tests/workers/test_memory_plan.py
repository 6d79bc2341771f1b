"""Planner arithmetic against hand-computed cases."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from headrace.workers.memory_plan import (
    GIB,
    GPU_BATCH_TOKENS,
    Measured,
    ModelShape,
    batch_budget_advice,
    plan,
    safetensors_size,
)

# Llama-2-7B's shape: 32 layers, 32 heads of 128, fp16.
LLAMA_7B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
}


def test_7b_fp16_on_a_24_gb_card_as_in_the_seeds() -> None:
    """Seed 001 §3.1: weights 14 GB, 3 GB overhead, 24 GB card -> 7 GB of KV cache; a token
    costs 2 x 32 layers x 32 heads x 128 x 2 bytes = 512 KiB, a 1,024-token sequence 512 MiB,
    so 13 sequences fit (the seed: 7-14); at 90% of the card 4.6 GB are left: 8 (the seed's
    "5-8 is stable")."""
    shape = ModelShape.from_config(LLAMA_7B, params=7_000_000_000)
    assert shape.weights == 14_000_000_000
    assert shape.kv_bytes_per_token == 524_288
    full = plan(
        shape,
        24_000_000_000,
        buckets=[1024],
        max_batch_tokens=8192,
        activation_bytes_per_token=0,  # in the 3 GB overhead, as the seed counts it
        overhead_bytes=3_000_000_000,
        utilization=1.0,
    )
    assert full.kv_budget_bytes == 7_000_000_000
    assert full.kv_tokens == 7_000_000_000 // 524_288 == 13_351
    assert full.max_sequences == 13
    assert full.bucket_rows == {1024: 8}  # the batch budget (8,192 tokens) binds first
    safe = plan(
        shape,
        24_000_000_000,
        buckets=[1024],
        max_batch_tokens=8192,
        activation_bytes_per_token=0,
        overhead_bytes=3_000_000_000,
        utilization=0.9,
    )
    assert safe.kv_budget_bytes == 4_600_000_000
    assert safe.max_sequences == 8
    assert not full.warnings and not safe.warnings


def test_grouped_query_attention_and_generated_tokens_per_bucket() -> None:
    """Llama-3-8B keeps 8 KV heads: 2 x 32 x 8 x 128 x 2 = 128 KiB a token. With 10 GiB for
    the cache (80,000 tokens) and 256 tokens generated, a 256-token prompt costs 512 tokens:
    160 rows by KV, 32 by an 8,192-token batch budget."""
    config = {**LLAMA_7B, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
    shape = ModelShape.from_config(config, params=8_000_000_000)
    assert shape.kv_bytes_per_token == 131_072
    kv = 80_000 * 131_072
    p = plan(
        shape,
        shape.weights + 1 * GIB + kv,
        buckets=[64, 256, 2048],
        max_batch_tokens=8192,
        activation_bytes_per_token=0,
        overhead_bytes=1 * GIB,
        utilization=1.0,
        max_new_tokens=256,
    )
    assert p.kv_tokens == 80_000
    assert p.sequence_tokens == 2048 + 256
    assert p.max_sequences == 80_000 // 2304 == 34
    assert p.bucket_rows == {64: 128, 256: 32, 2048: 4}  # 80,000 // 320 = 250 > 128 by batch


def test_encoder_rows_come_from_activations_and_measured_figures_win() -> None:
    """all-MiniLM-L6-v2 keeps no KV cache. Measured on an H200: 8,464 activation bytes per
    padded token; with 4 GiB left after weights and overhead, 507,439 tokens fit, more than
    the 65,536 asked, so 65,536 // bucket rows per batch."""
    config = {
        "architectures": ["BertModel"],
        "hidden_size": 384,
        "num_hidden_layers": 6,
        "num_attention_heads": 12,
        "max_position_embeddings": 512,
        "torch_dtype": "float32",
    }
    shape = ModelShape.from_config(config, params=22_713_216)
    assert shape.kv_bytes_per_token == 0
    measured = Measured(weight_bytes=90 * 1024**2, activation_bytes_per_token=8464)
    device = 90 * 1024**2 + 1 * GIB + 4 * GIB
    p = plan(
        shape,
        device,
        buckets=[32, 128, 512],
        max_batch_tokens=65_536,
        activation_bytes_per_token=1_000_000,  # the estimate, replaced by the measurement
        overhead_bytes=1 * GIB,
        utilization=1.0,
        measured=measured,
    )
    assert p.measured and p.weight_bytes == 90 * 1024**2
    assert p.max_batch_tokens == 65_536
    assert p.bucket_rows == {32: 2048, 128: 512, 512: 128}
    assert p.kv_tokens == 0 and p.max_sequences == 2048
    tight = plan(
        shape,
        device,
        buckets=[32],
        max_batch_tokens=1_000_000,
        activation_bytes_per_token=8464,
        overhead_bytes=1 * GIB,
        utilization=1.0,
        measured=measured,
    )
    assert tight.max_batch_tokens == 4 * GIB // 8464 == 507_439
    assert any("does not fit" in w for w in tight.warnings)


def test_a_model_larger_than_the_device_is_a_warning_not_a_negative_plan() -> None:
    shape = ModelShape.from_config(LLAMA_7B, params=7_000_000_000)
    p = plan(
        shape,
        8 * GIB,
        buckets=[512],
        max_batch_tokens=4096,
        activation_bytes_per_token=0,
        overhead_bytes=1 * GIB,
    )
    assert p.max_sequences == 0 and p.kv_budget_bytes == 0
    assert "exceed the usable" in p.warnings[0]


def test_weights_are_counted_from_safetensors_headers(tmp_path: Path) -> None:
    save_file(
        {"a": torch.zeros(3, 4, dtype=torch.float16), "b": torch.zeros(10, dtype=torch.float32)},
        str(tmp_path / "model.safetensors"),
    )
    (tmp_path / "config.json").write_text(
        '{"architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 4, "n_embd": 64,'
        ' "n_positions": 128}'
    )
    assert safetensors_size(tmp_path) == (22, 3 * 4 * 2 + 10 * 4)
    shape = ModelShape.from_model_dir(tmp_path)
    assert (shape.params, shape.weights, shape.layers, shape.head_dim) == (22, 64, 2, 16)
    assert shape.kv_bytes_per_token == 2 * 2 * 4 * 16 * 4  # float32 by default
    assert ModelShape.from_model_dir(tmp_path, dtype="float16").weights == 44


def test_a_config_without_layers_is_refused() -> None:
    with pytest.raises(ValueError, match="num_hidden_layers"):
        ModelShape.from_config({"hidden_size": 8}, params=1)


def test_the_test_model_planned_on_this_machine(tmp_path: Path) -> None:
    """The worker's --plan path: the test LM's own files, this machine's memory."""
    from headrace.models import tiny_lm
    from headrace.workers.memory_plan import plan_model

    model_dir = tiny_lm.ensure(tmp_path)
    device, p = plan_model(model_dir, "cpu", buckets=[64, 512], max_batch_tokens=4096)
    assert device == "cpu" and p.device_bytes > 0
    assert p.weight_bytes == safetensors_size(model_dir)[1]  # stored and run in float32
    assert p.kv_bytes_per_token == 2 * 2 * 4 * 16 * 4  # 2 layers, 4 heads of 16, fp32
    assert p.sequence_tokens == tiny_lm.MAX_POSITIONS  # 512 + 256 capped at the context
    assert p.bucket_rows[512] == 4096 // 512 and not p.measured
    assert p.warnings == []  # a CPU's budget on a CPU: no advice


def test_a_gpu_planned_with_a_cpus_batch_budget_is_warned() -> None:
    """The default budget (4,096 padded tokens) on CUDA: the plan says what to set; a GPU's
    budget, or any budget on a CPU, says nothing."""
    advice = batch_budget_advice(True, 4096)
    assert advice is not None and f"HEADRACE_MAX_BATCH_TOKENS={GPU_BATCH_TOKENS}" in advice
    assert "4,096" in advice
    assert batch_budget_advice(True, GPU_BATCH_TOKENS) is None
    assert batch_budget_advice(False, 4096) is None
