"""The parsers a worker applies to streams that name none: the operator's (--tool-call-parser,
--reasoning-parser), else the ones the model's own chat template implies (parsers_for_template), so a
model served with no flags still gets its tool calls and reasoning parsed. Chosen once, at start-up, and
logged: an operator sees what a template implied and can override it (the name "none" turns one off).
"""

from __future__ import annotations

import logging

from tokworker.parsers import parsers_for_template
from tokworker.parsers.reasoning import REASONING_PARSERS
from tokworker.parsers.tools import TOOL_PARSERS


def default_parsers(tool: str | None, reasoning: str | None, chat_template, log: logging.Logger
                    ) -> tuple[str | None, str | None]:
    """(tool parser, reasoning parser) the model's chat template implies where the operator named none
    (None where it named one, or the template implies none). chat_template: the model's (a str, a
    {name: template} dict whose "default" is used, or None)."""
    if isinstance(chat_template, dict):
        chat_template = chat_template.get("default")
    if (tool is not None and reasoning is not None) or not isinstance(chat_template, str):
        return None, None
    implied_tool, implied_reasoning = parsers_for_template(chat_template)
    implied_tool = implied_tool if tool is None and implied_tool in TOOL_PARSERS else None
    implied_reasoning = implied_reasoning if reasoning is None and implied_reasoning in REASONING_PARSERS else None
    if implied_tool:
        log.info("tool-call parser %r: implied by the model's chat template (--tool-call-parser overrides it)",
                 implied_tool)
    if implied_reasoning:
        log.info("reasoning parser %r for streams opened with their prompt: implied by the model's chat template "
                 "(--reasoning-parser overrides it)", implied_reasoning)
    return implied_tool, implied_reasoning
