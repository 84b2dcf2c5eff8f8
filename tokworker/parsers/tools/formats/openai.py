"""openai: gpt-oss's harmony format, a sequence of messages on channels.

    <|channel|>analysis<|message|>Need the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

(one stream of text; the prompt ends with "<|start|>assistant", so the first header has no <|start|>).
analysis goes to reasoning_content, final and commentary without a recipient to content, a message to
functions.NAME (or to a declared tool's bare name) is a call whose body is the arguments JSON. The
recipient may also sit in the role part: <|start|>assistant to=functions.NAME<|channel|>commentary
json<|message|>. Messages to other recipients (gpt-oss's built-in browser or python tools) are the
model's own work: reasoning. The first message may start with the recipient, " to=functions.NAME<|channel|>...", as the template
writes calls after the prompt's "<|start|>assistant".
"""

from __future__ import annotations

import regex

from ..core.base import ToolParser

START, CHANNEL, CONSTRAIN, MESSAGE = "<|start|>", "<|channel|>", "<|constrain|>", "<|message|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"

# [<|start|>ROLE or, right after the prompt's "<|start|>assistant", " to=RECIPIENT"]<|channel|>CHANNEL...<|message|>
_HEADER = regex.compile(r"(?:<\|start\|>(?P<role>[^<]{0,256})|(?P<role_tail>[ \t]*to=[^<\s]{1,256}[ \t]*))?"
                        r"<\|channel\|>(?P<channel>[^<]{0,256})(?:<\|constrain\|>[^<]{0,64})?<\|message\|>")
_RECIPIENT = regex.compile(r"\bto=(\S+)")
_CALL_END = regex.compile(r"\s*(?:<\|call\|>|<\|end\|>)")
_BODY_MARKERS = regex.compile("|".join(regex.escape(m) for m in (END, CALL, RETURN, START, CHANNEL)))
_BODY_PREFIXES = frozenset(m[:k] for m in (END, CALL, RETURN, START, CHANNEL) for k in range(1, len(m)))
_TERMINATORS = (END, CALL, RETURN)


class OpenAIToolParser(ToolParser):
    name = "openai"
    special_tokens = (START, CHANNEL, CONSTRAIN, MESSAGE, END, CALL, RETURN)
    reads_reasoning = True  # the analysis channel

    def _initial_mode(self):
        return self._header_mode

    def _resume_mode(self):
        self._body_reasoning = False
        return self._body_mode

    def _header_mode(self, final: bool) -> bool:
        if not self._buf:
            return False
        m = self._match(_HEADER, final)
        if m is None:
            return False
        if not m:  # not a header: plain text, released as content (a stray marker included)
            stray = next((s for s in (START, CHANNEL) if self._buf.startswith(s)), "")
            self._body_reasoning = False
            return self._reject_opening(len(stray))
        self._consume(m.end())
        channel = m["channel"].split()
        recipient = _RECIPIENT.search(f"{m['role'] or m['role_tail'] or ''} {m['channel']}")
        recipient = recipient[1] if recipient else None
        function = self._function_named(recipient) if recipient else None
        if function:
            self._open_call(function)
            self._stream_json_args(self._call_end_mode)
            return True
        self._body_reasoning = bool(recipient) or (channel[:1] == ["analysis"])
        self._mode = self._body_mode
        return True

    def _body_mode(self, final: bool) -> bool:
        """A message's text, up to its terminator or the next header."""
        buf = self._buf
        if not buf:
            return False
        m = _BODY_MARKERS.search(buf)
        end = m.start() if m else len(buf) - (0 if final else self._held_prefix(buf))
        if end:
            text = buf[:end]
            if self._body_reasoning:
                self._reasoning(text)
            else:
                self._content(text)
            self._consume(end)
        if m is None:
            return False
        if m[0] in _TERMINATORS:
            self._consume(len(m[0]))
        self._mode = self._header_mode
        return True

    def _call_end_mode(self, final: bool) -> bool:
        return self._expect_closing(_CALL_END, final, then=self._header_mode)

    def _function_named(self, recipient: str) -> str | None:
        """The function a recipient calls: functions.NAME, or a declared tool's bare name (the model
        drops the namespace at times; vLLM calls the tool then too). Other recipients are built-ins."""
        if recipient.startswith("functions.") and len(recipient) > len("functions."):
            return recipient[len("functions."):]
        return recipient if recipient in self._schemas else None

    @staticmethod
    def _held_prefix(buf: str) -> int:
        for pos in range(max(0, len(buf) - 10), len(buf)):
            if buf[pos] == "<" and buf[pos:] in _BODY_PREFIXES:
                return len(buf) - pos
        return 0
