"""What a model folder says of its chat format: whether it carries a chat template of its
own (``tokenizer_config.json``'s ``chat_template``, or ``chat_template.jinja``), and whether
that template has a tool format (it reads ``tools``).

headrace writes every chat as its own transcript (``sessions.prompt``), whose tool format
is ``schemas.tool_calls``'. A model with no template of its own is served tools in it. A
model whose template has no tool format was not made to call tools: tool requests to it are
refused, not answered with calls it cannot mean.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

# none: no template of its own; plain: a template without tools; tools: one with tools
ChatTemplate = Literal["none", "plain", "tools"]
_READS_TOOLS = re.compile(r"\btools\b")


def template_text(folder: Path) -> str | None:
    """The folder's chat template (several named templates: all of them, joined)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return None
    template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return template if isinstance(template, str) else None


def detect_chat_template(folder: Path) -> ChatTemplate:
    text = template_text(folder)
    if text is None:
        return "none"
    return "tools" if _READS_TOOLS.search(text) else "plain"


def tools_refused(template: ChatTemplate) -> str | None:
    """Why tool calls are not served for a model with ``template`` (None: they are)."""
    if template == "plain":
        return "the model's chat template has no tool format: it was not made to call tools"
    return None
