"""An incremental JSON validator: where does one JSON object end in text that arrives in pieces?

Tool-call arguments are streamed as the model writes them, so the parser must know, character by
character, whether the text so far is still a valid prefix of a JSON object and where the object closes.
Guessing (auto-closing partial JSON) corrupts arguments; this scanner never guesses: it accepts exactly
RFC 8259 JSON, rejects the first character that cannot continue it, and reports the object's end the
moment its closing brace arrives, whatever the chunk boundaries.
"""

from __future__ import annotations

import re

# Lexical states. Structural ones first, then inside strings, numbers and literals.
VALUE, OBJ_FIRST, OBJ_KEY, COLON, AFTER, ARR_FIRST = range(6)
STRING, ESCAPE, UNICODE = 6, 7, 8
NUM_MINUS, NUM_ZERO, NUM_INT, NUM_DOT, NUM_FRAC, NUM_EXP, NUM_EXP_SIGN, NUM_EXP_DIGITS = range(9, 17)
LITERAL = 17

_WS = " \t\n\r"
_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_ESCAPES = '"\\/bfnrt'
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
_NUMBER_END_OK = frozenset((NUM_ZERO, NUM_INT, NUM_FRAC, NUM_EXP_DIGITS))
_WS_RUN = re.compile(r"[ \t\n\r]+")
# What ends, escapes or breaks a JSON string (the scanner's search inside one).
_STRING_BREAK = re.compile(r'["\\\x00-\x1f]')
# Text that, read inside a string, leaves the scanner inside it: characters and whole escapes.
STRING_PIECE = re.compile(r'(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+')


class JsonScanner:
    """Validates one JSON object (or array) fed in pieces.

    `scan(text, i)` consumes text[i:] and returns the index where it stopped: just after the closing
    bracket once the value is complete (`done`), at the offending character on invalid input
    (`error`), else len(text). State carries over between calls, so text may be split anywhere.
    `inside_object=True` starts just after a member value of an already open object, to validate the
    rest of an enclosing call object (`, "id": "x"}`).
    `in_string` says the scan stopped inside a string (not inside an escape): text that STRING_PIECE
    matches whole then leaves every state unchanged, so a caller may pass it on without scanning it.
    """

    __slots__ = ("done", "error", "in_string", "_stack", "_state", "_key", "_pending", "_hex_left")

    def __init__(self, inside_object: bool = False):
        self.done = False
        self.error = False
        self.in_string = False
        self._stack: list[str] = ["{"] if inside_object else []
        self._state = AFTER if inside_object else VALUE
        self._key = False  # the string being read is an object key
        self._pending = ""  # remaining letters of a literal (true/false/null)
        self._hex_left = 0

    def scan(self, text: str, i: int = 0) -> int:
        if self.done or self.error:
            return i
        n = len(text)
        stack, state = self._stack, self._state
        while i < n:
            c = text[i]
            if state == STRING:
                if c == '"':
                    state = COLON if self._key else AFTER
                elif c == "\\":
                    state = ESCAPE
                elif c < " ":  # a raw control character
                    return self._fail(i, state)
                else:  # ordinary characters up to the next one that matters
                    found = _STRING_BREAK.search(text, i)
                    i = n if found is None else found.start()
                    continue
                i += 1
                continue
            if c in _WS and state < STRING:  # one space or newline is the usual; runs are indentation
                i = _WS_RUN.match(text, i).end() if i + 1 < n and text[i + 1] in _WS else i + 1
                continue
            if state == AFTER:
                if not stack:
                    return self._fail(i, state)
                top = stack[-1]
                if c == ",":
                    state = OBJ_KEY if top == "{" else VALUE
                elif (c == "}" and top == "{") or (c == "]" and top == "["):
                    stack.pop()
                    if not stack:
                        self.done = True
                        self._state = AFTER
                        return i + 1
                else:
                    return self._fail(i, state)
                i += 1
            elif state == VALUE or state == ARR_FIRST:
                if c == "]" and state == ARR_FIRST:
                    stack.pop()
                    state = AFTER
                    if not stack:
                        self.done = True
                        self._state = state
                        return i + 1
                elif c == "{":
                    stack.append("{")
                    state = OBJ_FIRST
                elif c == "[":
                    stack.append("[")
                    state = ARR_FIRST
                elif not stack:  # arguments are an object or an array, never a bare scalar
                    return self._fail(i, state)
                elif c == '"':
                    self._key = False
                    state = STRING
                elif c == "-":
                    state = NUM_MINUS
                elif c == "0":
                    state = NUM_ZERO
                elif c in _DIGITS:
                    state = NUM_INT
                elif c in _LITERALS:
                    self._pending = _LITERALS[c]
                    state = LITERAL
                else:
                    return self._fail(i, state)
                i += 1
            elif state == OBJ_FIRST or state == OBJ_KEY:
                if c == '"':
                    self._key = True
                    state = STRING
                elif c == "}" and state == OBJ_FIRST:
                    stack.pop()
                    state = AFTER
                    if not stack:
                        self.done = True
                        self._state = state
                        return i + 1
                else:
                    return self._fail(i, state)
                i += 1
            elif state == COLON:
                if c != ":":
                    return self._fail(i, state)
                state = VALUE
                i += 1
            elif state == ESCAPE:
                if c == "u":
                    self._hex_left = 4
                    state = UNICODE
                elif c in _ESCAPES:
                    state = STRING
                else:
                    return self._fail(i, state)
                i += 1
            elif state == UNICODE:
                if c not in _HEX:
                    return self._fail(i, state)
                self._hex_left -= 1
                if not self._hex_left:
                    state = STRING
                i += 1
            elif state == LITERAL:
                if c != self._pending[0]:
                    return self._fail(i, state)
                self._pending = self._pending[1:]
                if not self._pending:
                    state = AFTER
                i += 1
            else:  # numbers: consume what continues the number, else end it and re-read c
                nxt = _number_step(state, c)
                if nxt is None:
                    if state not in _NUMBER_END_OK:
                        return self._fail(i, state)
                    state = AFTER
                    continue
                state = nxt
                i += 1
        self._state = state
        self.in_string = state == STRING
        return i

    @property
    def brackets(self) -> str:
        """The brackets open where the scan stopped, outermost first ("{[")."""
        return "".join(self._stack)

    @property
    def stopped_in_string(self) -> bool:
        """The scan stopped inside a string (an escape included): at an error, on a raw control character."""
        return self._state in (STRING, ESCAPE, UNICODE)

    def _fail(self, i: int, state: int) -> int:
        self.error = True
        self._state = state
        return i


def _number_step(state: int, c: str) -> int | None:
    """The number state after reading c, or None when c cannot continue the number."""
    digit = c in _DIGITS
    if state == NUM_MINUS:
        return NUM_ZERO if c == "0" else NUM_INT if digit else None
    if state in (NUM_ZERO, NUM_INT):
        if digit:
            return NUM_INT if state == NUM_INT else None
        return NUM_DOT if c == "." else NUM_EXP if c in "eE" else None
    if state in (NUM_DOT, NUM_FRAC):
        if digit:
            return NUM_FRAC
        return NUM_EXP if state == NUM_FRAC and c in "eE" else None
    if state == NUM_EXP:
        return NUM_EXP_SIGN if c in "+-" else NUM_EXP_DIGITS if digit else None
    return NUM_EXP_DIGITS if digit else None  # NUM_EXP_SIGN, NUM_EXP_DIGITS
