"""``headrace-test-lm``: a TEST MODEL for generation, built locally (no language model can be
downloaded here). A 2-layer GPT-2 (64-wide, 4 heads) with weights drawn from a fixed seed, and
a byte-level BPE tokenizer trained on a fixed paragraph. Its text is gibberish; what it is for
is exercising the generation path (batching, left padding, sampling, stop sequences,
streaming) with a real transformers model, deterministically: greedy decoding of the same
prompt gives the same tokens everywhere the same torch version runs.

It is built once into ``$XDG_CACHE_HOME/headrace/models/headrace-test-lm-v1`` (default
``~/.cache``; a few seconds) and reused.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

NAME = "headrace-test-lm"
VERSION = "headrace-test-lm-v1"  # change when the recipe below changes
SEED = 20261130
MAX_POSITIONS = 512
EOS = "<|endoftext|>"
PAD = "<|pad|>"
CORPUS = """\
Water leaves the river at the weir and runs along the headrace to the mill. The headrace is
a channel cut with a gentle fall, so the water arrives with height to spare. At the wheel the
water turns the paddles, the shaft turns the stones, and the stones grind the grain. Below
the wheel the tailrace carries the water back to the river. A sluice at the head of the
channel lets the miller close it in a flood, and a spillway takes what the wheel cannot use.
Requests arrive on topics, wait in buckets of similar length, and leave as batches.
"""


def build(directory: Path, initializer_range: float = 0.02) -> Path:
    """Write the test model and tokenizer to ``directory`` (created); return it.

    ``initializer_range`` is the spread of the drawn weights. At GPT-2's 0.02 (the served test
    model) a token's next token hardly depends on the tokens before it; tests that must tell
    one row's context from another's build a copy at a wider spread (``tests/tiny_model``)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=PAD,
        model_max_length=MAX_POSITIONS,
        padding_side="left",
    )
    torch.manual_seed(SEED)
    config = GPT2Config(
        vocab_size=len(fast),
        n_positions=MAX_POSITIONS,
        n_embd=64,
        n_layer=2,
        n_head=4,
        initializer_range=initializer_range,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    fast.save_pretrained(directory)
    (directory / "HEADRACE_TEST_MODEL.json").write_text(
        json.dumps({"name": NAME, "version": VERSION, "seed": SEED, "test_model": True})
    )
    return directory


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "headrace"


def ensure(root: Path) -> Path:
    """The built model's directory under ``root``, building it first if it is not there yet
    (atomically: several workers may start at once)."""
    target = root / "models" / VERSION
    if (target / "HEADRACE_TEST_MODEL.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    build(scratch)
    try:
        os.rename(scratch, target)
    except OSError:  # another process won the race: its copy is the same
        if not (target / "HEADRACE_TEST_MODEL.json").exists():
            raise
    return target
