"""A committed call's arguments object, streamed: JSON as it comes (only validated text is sent), or a
Python literal ({'city': 'Paris'}) read whole and sent as JSON. If the arguments break off at the end of
the stream the call keeps what was streamed, as OpenAI's own API does on finish_reason "length"; text that
breaks the call's syntax is released as content.
"""

from __future__ import annotations

from .emit import WHITESPACE, Emitter
from .jsonscan import STRING_PIECE, JsonScanner
from .literals import LiteralEnd, literal_json

# An opening (marker + call header) longer than this is not a call: stop holding it back.
HEADER_LIMIT = 1024


class JsonArgs(Emitter):
    """The modes that stream an arguments object, entered by `_stream_json_args`; the parser (base.py)
    supplies `_resume_mode`, where scanning continues after a broken call."""

    # The index of the call whose JSON arguments are inside a string, with nothing buffered, else -1: a
    # text that `is_string_piece` matches whole is then more of those arguments, one fragment of itself,
    # and changes no state, so a caller may emit it without feed() (TextStream does, per token).
    string_args = -1
    is_string_piece = STRING_PIECE.fullmatch  # characters and whole escapes: what leaves a JSON string open

    def __init__(self):
        super().__init__()
        self._scanner: JsonScanner | None = None
        self._after_args = None  # the mode to enter once the arguments object closes
        self._args_open = False  # streaming JSON arguments with nothing buffered: feed scans text directly

    def _stream_json_args(self, after) -> None:
        """Commit point passed: stream the arguments object at the buffer's start, then enter `after`."""
        self._after_args = after
        self._mode = self._args_kind_mode

    def _args_kind_mode(self, final: bool) -> bool:
        """The character after the arguments' "{" says how they are written: JSON, streamed as it comes,
        or a Python literal ({'city': 'Paris'}: Apriel's template renders dict arguments so), read whole
        and sent as JSON."""
        buf = self._buf
        if buf[:1] == "{":
            rest = buf[1:].lstrip(WHITESPACE)
            if not rest and not final and len(buf) <= HEADER_LIMIT:
                return False
            literal = rest[:1] == "'"
        elif not buf and not final:
            return False
        else:
            literal = False
        if literal:
            self._literal_end = LiteralEnd(0, bracketed=True)
            self._mode = self._literal_args_mode
        else:
            self._scanner = JsonScanner()
            self._mode = self._json_args_mode
        return True

    def _literal_args_mode(self, final: bool) -> bool:
        end = self._literal_end.find(self._buf, final)
        if end is None:
            return self._break_call() if final else False  # cut off: nothing was sent, the text is no call
        arguments = literal_json(self._buf[:end])
        if arguments is None or arguments[0] != "{":
            return self._break_call()
        self._args(arguments)
        self._buf = self._buf[end:]
        self._mode = self._after_args
        return True

    def _json_args_mode(self, final: bool) -> bool:
        buf = self._buf
        if not buf:
            return False
        self._buf = ""
        return self._scan_args(buf)

    def _scan_args(self, text: str) -> bool:
        """Stream the arguments text that opens `text` (taken from the buffer's start); what follows the
        object, if it closed or broke, goes back to the buffer. The mode's return value."""
        scanner = self._scanner
        end = scanner.scan(text, 0)
        self._args(text[:end])
        if scanner.done:
            self._buf = text[end:]
            self._mode = self._after_args
            return True
        if scanner.error:
            self._buf = text[end:]
            return self._break_call()
        self._args_open = True  # all of it was arguments: the next text may skip the buffer
        if scanner.in_string:
            self.string_args = self._index
        return False

    def _break_call(self) -> bool:
        """The call's syntax broke after it was committed: it keeps what was sent; the rest is content."""
        self._close_call()
        self._mode = self._resume_mode()
        return True
