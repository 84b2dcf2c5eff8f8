"""pythonic and llama4_pythonic: a Python list of calls at the start of the output (Llama 3.2 and 4).

    [get_weather(city="Paris", days=3), now()]

optionally inside <|python_start|>...<|python_end|> (Llama 4); output that does not open with a call is
content, all of it. The output opens after a think block written first (thinkblock.py).
"""

from __future__ import annotations

import regex

from ..core.pythonic import PythonicCalls
from ..core.thinkblock import CallsOpenTheOutput

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"


class PythonicToolParser(CallsOpenTheOutput, PythonicCalls):
    name = "pythonic"
    special_tokens = (PYTHON_START, PYTHON_END)
    first_call = regex.compile(r"\s*(?:<\|python_start\|>\s*)?\[\s*(?P<fname>[A-Za-z_][\w.]{0,255})\s*\(")
    closing = regex.compile(r"\s*<\|python_end\|>")

    def _output_start(self):
        return self._first_call_mode

    def _resume_mode(self):
        return self._passthrough_mode

    def _first_call_mode(self, final: bool) -> bool:
        if not self._buf and not final:
            return False
        return self._call_start(self.first_call, final)
