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
    """(tool parser, reasoning parser) for streams that name none. chat_template: the model's (a str, a
    {name: template} dict whose "default" is used, or None)."""
    if tool is not None and reasoning is not None:
        return tool, reasoning
    if isinstance(chat_template, dict):
        chat_template = chat_template.get("default")
    if not isinstance(chat_template, str):
        return tool, reasoning
    implied_tool, implied_reasoning = parsers_for_template(chat_template)
    if tool is None and implied_tool in TOOL_PARSERS:
        tool = implied_tool
        log.info("tool-call parser %r: implied by the model's chat template (--tool-call-parser overrides it)", tool)
    if reasoning is None and implied_reasoning in REASONING_PARSERS:
        reasoning = implied_reasoning
        log.info("reasoning parser %r: implied by the model's chat template (--reasoning-parser overrides it)",
                 reasoning)
    return tool, reasoning
