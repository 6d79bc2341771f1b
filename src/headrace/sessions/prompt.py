"""How a session's history and a new turn become one prompt, and the turns a reply adds.

A plain-text transcript (``role: content`` lines, then ``assistant:``): the test model has
no chat template; a model with one would use ``tokenizer.apply_chat_template`` here. Turn ids
come from the request id, so a redelivered batch appends nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from headrace.sessions.store import Turn


def render_prompt(history: list[Turn], user_input: str) -> str:
    return transcript([(t.role, t.content) for t in history] + [("user", user_input)])


def transcript(lines: Sequence[tuple[str, str]]) -> str:
    """``role: content`` lines, then ``assistant:`` for the model to go on from. A chat with
    tools has them as a ``tools:`` line first, and ``tool:`` lines for their results
    (``schemas.tool_calls`` has how a call is written)."""
    return "\n".join([*(f"{role}: {content}" for role, content in lines), "assistant:"])


def exchange(request_id: str, user_input: str, answer: str) -> list[Turn]:
    return [
        Turn(role="user", content=user_input, turn_id=f"{request_id}:user"),
        Turn(role="assistant", content=answer, turn_id=f"{request_id}:assistant"),
    ]
