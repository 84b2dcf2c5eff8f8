"""functionary_v31 and functionary_v32: MeetKai functionary medium v3.1 / v3.2 (Llama 3.1 based).

    v3.1: <function=get_weather>{"city": "Paris"}</function>   and   <|python_tag|>print(1)
    v3.2: get_weather\n{"city": "Paris"}>>>all\nIt is sunny.   (the prompt ends with ">>>", so the first
          recipient comes without it; ">>>all" is text for the user)

v3.1's python tool takes the rest of the output as code: a call to "python" with {"code": ...}.
"""

from __future__ import annotations

import regex

from ..core.base import ToolParser
from ..core.sectioned import SectionedToolParser
from ..core.textargs import string_fragment
from ..core.thinkblock import CallsOpenTheOutput

PYTHON_TAG = "<|python_tag|>"


class FunctionaryV31ToolParser(SectionedToolParser):
    name = "functionary_v31"
    special_tokens = (PYTHON_TAG,)
    starts = ("<function=", PYTHON_TAG)
    _open = regex.compile(r"<function=(?P<fname>[^>\n<]{1,256})>\s*(?=\{)")
    _close = regex.compile(r"\s*</function>")

    def _opening(self, final: bool) -> bool:
        if not self._buf.startswith(PYTHON_TAG):
            return super()._opening(final)
        self._consume(len(PYTHON_TAG))
        self._open_call("python")
        self._args('{"code": "')
        self._mode = self._code_mode
        return True

    def _code_mode(self, final: bool) -> bool:
        if self._buf:
            self._args(string_fragment(self._buf))
            self._buf = ""
        if final:
            self._args('"}')
            self._close_call()
            self._mode = self._passthrough_mode
        return False


# ">>>" (or nothing, at the start) then the recipient and a newline; a function's arguments follow
_RECIPIENT = r"(?:(?P<all>all)\n|(?P<fname>[^\s>]{1,256})\n\s*(?=\{))"
_FIRST = regex.compile(r"(?:>>>)?" + _RECIPIENT)
_NEXT = regex.compile(">>>" + _RECIPIENT)


class FunctionaryV32ToolParser(CallsOpenTheOutput, ToolParser):
    name = "functionary_v32"
    starts = (">>>",)

    def _output_start(self):
        return self._first_mode

    def _first_mode(self, final: bool) -> bool:
        if not self._buf and not final:
            return False
        return self._recipient(_FIRST, final, 0)

    def _opening(self, final: bool) -> bool:
        return self._recipient(_NEXT, final, len(">>>"))

    def _recipient(self, pattern, final: bool, reject_len: int) -> bool:
        m = self._match(pattern, final)
        if m is None:
            return False
        if not m:
            return self._reject_opening(reject_len)
        self._consume(m.end())
        if m["all"]:
            self._mode = self._content_mode
            return True
        self._open_call(m["fname"])
        self._stream_json_args(self._call_done_mode)
        return True

    def _call_done_mode(self, final: bool) -> bool:
        self._close_call()
        self._mode = self._content_mode
        return True
