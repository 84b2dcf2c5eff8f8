"""A request body's bytes read into its Struct (tokworker/api/requests.py): a body nested deeper than MAX_DEPTH
is refused before it is decoded (`nesting_over`: decoding it would recurse once per level), and the decode
is one pass for the usual body, naming the top-level fields its Struct does not know (`decode_body`).
"""

from __future__ import annotations

import msgspec
from msgspec import Struct

MAX_DEPTH = 128                             # arrays and objects inside each other, the body itself included
_STRUCTURE = b"[]{}\""
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(_STRUCTURE)))


def nesting_over(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    r"""Whether the JSON text `raw` nests arrays and objects more than `limit` deep, from its bytes (brackets
    inside strings do not count). Cheap: a body with at most `limit` brackets is not scanned; otherwise only
    its brackets and quotes are, after its escapes are removed, and the scan stops at the first level too deep.

    >>> nesting_over(b'{"a": [[1], {"b": "[[[["}]}', limit=3), nesting_over(b'{"a": [[[1]]]}', limit=3)
    (False, True)
    >>> nesting_over(br'["\\", "\"[[[", [[]]]', limit=3), nesting_over(br'["\\\"]", [[[]]]]', limit=3)
    (False, True)
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    if b"\\" in raw:     # a backslash pair is one escaped backslash, then a backslash-quote is a quote in a string
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # two quotes side by side (a string without brackets, or one's end and the next one's start) change nothing
    marks = raw.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    depth, quoted = 0, False
    for mark in marks:
        if mark == 34:                       # "
            quoted = not quoted
        elif quoted:
            continue
        elif mark == 91 or mark == 123:      # [ {
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])   # the body's keys, its values left unread


def unknown_fields(raw: bytes, kind: type) -> list[str]:
    """The top-level fields of a JSON body that `kind` does not know (decoding ignores them, as vLLM does).

    >>> from tokworker.api.requests import ChatCompletionRequest
    >>> unknown_fields(b'{"model": "m", "messages": [], "top_kk": 3}', ChatCompletionRequest)
    ['top_kk']
    """
    try:
        keys = _TOP.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []
    known = kind.__struct_encode_fields__
    return [key for key in keys if key not in known]


_DECODERS: dict[type, tuple[msgspec.json.Decoder, msgspec.json.Decoder]] = {}


def decode_body(raw: bytes, kind: type) -> tuple[Struct, list[str]]:
    """`raw` decoded into `kind`, and the top-level fields `kind` does not know (ignored, as vLLM ignores
    them). One pass for the usual body: it is decoded into a twin of `kind` that refuses unknown fields at the
    top, and only a body that has some is decoded again as `kind` (whose errors are the ones raised) and its
    keys read. The value is an instance of `kind` (or of that twin, a subclass adding nothing).

    >>> from tokworker.api.requests import ChatCompletionRequest
    >>> body, unknown = decode_body(b'{"messages": [{"role": "user", "content": "hi"}], "top_kk": 3}',
    ...                             ChatCompletionRequest)
    >>> isinstance(body, ChatCompletionRequest), body.messages[0].content, unknown
    (True, 'hi', ['top_kk'])
    >>> decode_body(b'{"messages": [{"role": "user", "content": "hi", "extra": 1}]}', ChatCompletionRequest)[1]
    []
    """
    decoders = _DECODERS.get(kind)
    if decoders is None:
        twin = type(kind.__name__, (kind,), {"__module__": kind.__module__, "__doc__": kind.__doc__},
                    forbid_unknown_fields=True)
        decoders = _DECODERS[kind] = (msgspec.json.Decoder(twin), msgspec.json.Decoder(kind))
    try:
        return decoders[0].decode(raw), []
    except msgspec.ValidationError as error:
        if not str(error).startswith("Object contains unknown field"):
            raise
    return decoders[1].decode(raw), unknown_fields(raw, kind)
