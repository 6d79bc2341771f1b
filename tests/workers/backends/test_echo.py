"""The echo backend (benchmarks only): real tokenisation and limits, no model, labelled."""

from __future__ import annotations

from headrace.models.registry import model_spec
from headrace.workers.backends.base import default_shapes
from headrace.workers.backends.echo import ECHO_DIM, EchoBackend


def test_echo_backend_tokenises_like_the_model_and_says_what_it_is() -> None:
    spec = model_spec("all-MiniLM-L6-v2")
    echo = EchoBackend(spec.name, spec.path, spec.max_tokens)
    assert echo.name == spec.name and echo.device == "none"
    echo.load_weights()
    echo.build()
    echo.warm_up(default_shapes([16, 512]))
    items = echo.encode(["a short text", "word " * 600, "word " * 600], [False, False, True])
    assert items[0].token_count == 5  # [CLS] a short text [SEP]
    assert items[1].too_long and not items[2].too_long and items[2].token_count == 512
    vectors, real, padded = echo.embed([items[0], items[2]], [True, True])
    assert [len(v) for v in vectors] == [ECHO_DIM, ECHO_DIM]
    assert (real, padded) == (5 + 512, 2 * 512)
