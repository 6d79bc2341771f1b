"""How a session's history and a new turn become one prompt, and the turns a reply adds.

A plain-text transcript (``role: content`` lines, then ``assistant:``): the test model has
no chat template; a model with one would use ``tokenizer.apply_chat_template`` here. Turn ids
come from the request id, so a redelivered batch appends nothing twice.
"""

from __future__ import annotations

from headrace.sessions.store import Turn


def render_prompt(history: list[Turn], user_input: str) -> str:
    lines = [f"{t.role}: {t.content}" for t in history]
    lines += [f"user: {user_input}", "assistant:"]
    return "\n".join(lines)


def exchange(request_id: str, user_input: str, answer: str) -> list[Turn]:
    return [
        Turn(role="user", content=user_input, turn_id=f"{request_id}:user"),
        Turn(role="assistant", content=answer, turn_id=f"{request_id}:assistant"),
    ]
