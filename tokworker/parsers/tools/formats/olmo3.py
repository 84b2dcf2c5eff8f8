"""olmo3: AI2 OLMo 3 (pythonic calls, one per line, in function_calls tags).

    <function_calls>
    get_weather(city="Paris")
    now()
    </function_calls>

Values are Python literals or JSON spellings (null, true, false), as OLMo writes them after seeing the
tools as JSON. vLLM keeps nothing of the text around the tags once it finds calls; here it is content.
"""

from __future__ import annotations

import regex

from ..core.pythonic import PythonicCalls

OPEN, CLOSE = "<function_calls>", "</function_calls>"
_NAME = r"(?P<fname>[A-Za-z_][\w.]{0,255})\s*\("


class Olmo3ToolParser(PythonicCalls):
    name = "olmo3"
    special_tokens = (OPEN, CLOSE)
    starts = (OPEN,)
    first_call = regex.compile(regex.escape(OPEN) + r"\s*" + _NAME)
    next_call = regex.compile(r"(?:[ \t]*,|[ \t]*\n)\s*" + _NAME)  # a call per line (a comma also separates)
    calls_end = regex.compile(r"\s*" + regex.escape(CLOSE))
    closing = None

    def _opening(self, final: bool) -> bool:
        return self._call_start(self.first_call, final, len(OPEN))
