"""The semantic cache's guards: near prompts that ask something else are refused, rewordings
pass. Pure."""

from __future__ import annotations

import pytest

from headrace.cache.semantic_guards import conflict


@pytest.mark.parametrize(
    ("cached", "asked"),
    [
        ("How do I reset my password?", "How can I reset my password?"),
        ("How do I reset my password?", "Can you explain this: How do I reset my password?"),
        ("Why is the sky blue?", "why is the sky blue"),
        ("It does not return a value.", "It doesn't return a value."),  # one negation each
        ("Which ports does Redis listen on?", "Which ports does Redis listen on? Thanks!"),
        ("Sort the lists by length.", "Sort the list by length."),  # one stem
    ],
)
def test_a_rewording_passes(cached: str, asked: str) -> None:
    assert conflict(cached, asked) is None


@pytest.mark.parametrize(
    ("cached", "asked", "why"),
    [
        ("Is the river safe to swim in?", "Is the river not safe to swim in?", "negation"),
        ("Is it true?", "Isn't it true?", "negation"),
        ("What is 12 times 4?", "What is 12 times 5?", "numbers"),
        ("Give me three examples.", "Give me five examples.", "numbers"),
        ("Who founded Microsoft?", "Who founded Apple?", "names"),
        ("Explain the iPhone battery.", "Explain the Pixel battery.", "names"),
        ('What does "strict" mean here?', 'What does "lenient" mean here?', "names"),
        ("Return the first element.", "Return the last element.", "numbers"),  # an ordinal
        ("Open the file before reading.", "Close the file before reading.", "substitution"),
        ("Evaluate the left-hand side.", "Evaluate the right-hand side.", "substitution"),
        ("What is the price of apples?", "What is the price of oranges?", "substitution"),
        (
            "Return the keys of the dict.",
            "Return the keys, values or items of the dict.",
            "addition",
        ),
        ("Skip the test unless it is slow.", "Skip the test if it is slow.", "addition"),
        ("Convert a string to bytes.", "Convert bytes to a string.", "order"),
    ],
)
def test_a_near_prompt_that_asks_something_else_is_refused(
    cached: str, asked: str, why: str
) -> None:
    assert conflict(cached, asked) == why
    assert conflict(asked, cached) == why  # either way round
