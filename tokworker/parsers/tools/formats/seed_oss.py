"""seed_oss: ByteDance Seed-OSS (qwen3_coder's markup in its own wrapper).

    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    </function>
    </seed:tool_call>

The template writes a value right after its tag; a "\\n" the model puts after the tag or before the
closing tag is formatting, as in qwen3_coder. Values are typed by the tool's schema. A think block the
reasoning parser has not taken is content, calls and all (the model writes call examples while it
thinks; vLLM's seed_oss reads them so too).
"""

from __future__ import annotations

import regex

from ..core.thinkblock import ThinkBlockIsContent
from .qwen3_coder import Qwen3CoderToolParser

OPEN, CLOSE = "<seed:tool_call>", "</seed:tool_call>"
THINK, THINK_END = "<seed:think>", "</seed:think>"


class SeedOssToolParser(ThinkBlockIsContent, Qwen3CoderToolParser):
    name = "seed_oss"
    special_tokens = (OPEN, CLOSE)
    starts = (OPEN, "<function=", THINK)
    wrapper = OPEN
    _open = regex.compile(r"(?:<seed:tool_call>\s*)?<function=(?P<fname>[^>\n<]{1,256})>")
    _close = regex.compile(r"\s*</seed:tool_call>")
    call_end = regex.compile(r"\s*(?:(?P<function></function>)|</seed:tool_call>)")
    think, think_end = THINK, THINK_END
