"""Size checks that run BEFORE an operation allocates its result.

jinja2's sandbox stops a template from reaching Python internals but not from asking for `'a' * 10**9`,
`' '.center(10**9)`, `'%*s' % (10**9, '')` or `2 ** 10**9`: each is one C call that allocates (or computes)
before any timer can interrupt it. Every operation whose result can be much larger than its inputs is
therefore priced here first, from the lengths and numbers it was given, and refused over the limit.
Operations whose result is linear in their inputs (upper, split, slicing, ...) need no check: their inputs
were already bounded.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Mapping
from itertools import islice
from dataclasses import dataclass

from .errors import TemplateLimitError


@dataclass(frozen=True)
class Limits:
    """The bounds of one render. The defaults fit every real template with a million-token chat."""

    max_template_chars: int = 256 * 1024       # refused before compiling
    time_budget: float = 1.0                   # seconds of CPU time for a compile, and for a render (watchdog.py)
    wall_ceiling: float = 60.0                 # seconds of wall clock for either: a backstop, not the budget
    max_output_chars: int = 16 * 1024 * 1024   # the whole output, and any one string, list or JSON dump
    max_items: int = 1_000_000                 # one list or tuple built by repetition or concatenation
    max_int_bits: int = 1 << 16                # one integer (Python can't print more than 4300 digits anyway)
    max_memory_bytes: int = 512 * 1024 * 1024  # growth of the process' resident memory during one render
    max_json_indent: int = 256                 # tojson indent and separator lengths


def refuse(what: str, size: int, limit: int):
    raise TemplateLimitError(f"template asked for {what} of size {size:,}, over the limit of {limit:,}")


def check_binop(limits: Limits, operator: str, left, right) -> None:
    """Price `left <operator> right` for the intercepted operators (all arithmetic)."""
    if type(left) is int or type(right) is int:
        if isinstance(left, int) and isinstance(right, int):
            _check_int_op(limits, operator, left, right)
            return
    if operator == "*":
        if isinstance(right, int) and isinstance(left, (str, bytes, list, tuple)):
            _check_repeat(limits, left, right)
        elif isinstance(left, int) and isinstance(right, (str, bytes, list, tuple)):
            _check_repeat(limits, right, left)
    elif operator == "+":
        if isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
            check_chars(limits, len(left) + len(right))
        elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            check_items(limits, len(left) + len(right))


def _check_int_op(limits: Limits, operator: str, left: int, right: int) -> None:
    """Integer arithmetic runs in C (a 10**6-bit `%` takes seconds): operands are capped, and so is the
    result, from the operands' sizes."""
    cap = limits.max_int_bits
    left_bits, right_bits = left.bit_length(), right.bit_length()
    if max(left_bits, right_bits) > cap:
        refuse("arithmetic on an integer (bits)", max(left_bits, right_bits), cap)
    if operator == "*":
        bits = left_bits + right_bits
    elif operator == "**":
        bits = (left_bits - 1) * right if right > 0 and abs(left) > 1 else 0
    else:
        return
    if bits > cap:
        refuse(f"an integer {'power' if operator == '**' else 'product'} (bits)", bits, cap)


def check_int(limits: Limits, value):
    """An integer made from text or bytes, refused over the bit cap; returns it."""
    if isinstance(value, int) and value.bit_length() > limits.max_int_bits:
        refuse("an integer (bits)", value.bit_length(), limits.max_int_bits)
    return value


def check_int_text(limits: Limits, text) -> None:
    """Before int(text, base): every digit is at least a bit, so longer text is refused unparsed
    (power-of-two bases are not covered by Python's own 4,300-digit limit)."""
    digits = len(text) - text.count("_" if isinstance(text, str) else b"_")
    if digits > limits.max_int_bits:
        refuse("an integer's digits", digits, limits.max_int_bits)


def _check_repeat(limits: Limits, sequence, count: int) -> None:
    size = len(sequence) * max(count, 0)
    if isinstance(sequence, (str, bytes)):
        check_chars(limits, size)
    else:
        check_items(limits, size)


def check_chars(limits: Limits, size: int) -> None:
    if size > limits.max_output_chars:
        refuse("a string", size, limits.max_output_chars)


def check_items(limits: Limits, size: int) -> None:
    if size > limits.max_items:
        refuse("a list", size, limits.max_items)


# printf-style conversion: %[(key)][flags][width][.precision][length]type
_PERCENT = re.compile(r"%(?:\(([^)]*)\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+)?)?[hlL]?(.)", re.S)


def percent_format_size(template: str, values, measure) -> int:
    """An upper bound on the length of `template % values`, computed from the widths, precisions and values.

    The exact size is not needed, only a bound that can't be fooled: a width or precision counts in full,
    a number by its digits, anything else by `measure` (a priced repr size)."""
    positional = list(values) if isinstance(values, tuple) else [values]
    mapping = values if isinstance(values, Mapping) else None
    size, index = len(template), 0

    def take():
        nonlocal index
        value = positional[index] if index < len(positional) else ""
        index += 1
        return value

    for match in _PERCENT.finditer(template):
        key, width, precision, kind = match.groups()
        if kind == "%":
            continue
        width = _number(take() if width == "*" else width)
        precision = _number(take() if precision == "*" else precision)
        value = mapping.get(key, "") if (key is not None and mapping is not None) else take()
        size += width + precision + _rendered_size(value, measure, kind)
    return size


def _number(value) -> int:
    try:
        return abs(int(value)) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def _rendered_size(value, measure, kind: str = "s") -> int:
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if isinstance(value, float):
        return 330
    if isinstance(value, str) and kind not in "ra":
        return len(value)
    return measure(value)


# [[fill]align][sign][z][#][0][width][grouping][.precision][type]
_FORMAT_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?[a-zA-Z%]?", re.S)


def format_field_size(value, spec: str, measure) -> int:
    """An upper bound on the length of format(value, spec) for str.format's fields."""
    match = _FORMAT_SPEC.fullmatch(spec)
    width = int(match.group(1) or 0) if match else len(spec)
    precision = int(match.group(2) or 0) if match else 0
    return width + precision + _rendered_size(value, measure)


GROWING_TEXT_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "translate",
                                  "upper", "lower", "title", "capitalize", "swapcase", "casefold", "encode",
                                  "decode", "hex", "splitlines", "maketrans"})


def check_str_method(limits: Limits, name: str, text, args: tuple, kwargs: dict):
    """Price a call of str/bytes method `name` (one of GROWING_TEXT_METHODS) on `text`. Returns the joined
    list for `join` (its iterable is consumed here), else None."""
    if name in ("center", "ljust", "rjust", "zfill"):
        width = args[0] if args else kwargs.get("width", 0)
        if isinstance(width, int):
            check_chars(limits, max(len(text), width))
    elif name == "expandtabs":
        tabsize = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(tabsize, int):
            check_chars(limits, len(text) + text.count("\t" if isinstance(text, str) else b"\t") * max(tabsize, 0))
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        count = args[2] if len(args) > 2 else kwargs.get("count", -1)
        kind = str if isinstance(text, str) else bytes     # Markup's arguments are plain strings
        if isinstance(old, kind) and isinstance(new, kind) and len(new) > len(old):
            hits = text.count(old) if old else len(text) + 1
            if isinstance(count, int) and count >= 0:
                hits = min(hits, count)
            check_chars(limits, len(text) + hits * (len(new) - len(old)))
    elif name == "join" and len(args) == 1 and not kwargs:
        parts = bounded_list(limits, args[0])
        size = len(text) * max(len(parts) - 1, 0)
        for part in parts:
            size += len(part) if isinstance(part, (str, bytes)) else 0
        check_chars(limits, size)
        return parts
    elif name == "translate" and args:
        table = args[0]
        values = table.values() if isinstance(table, Mapping) else table if isinstance(table, (list, tuple)) else ()
        longest = max((len(v) for v in values if isinstance(v, (str, bytes))), default=1)
        check_chars(limits, len(text) * max(longest, 1))
    elif name in _CASE_METHODS and isinstance(text, str) and not text.isascii():
        check_chars(limits, 3 * len(text))      # 'ﬃ'.upper() is 'FFI': Unicode case mappings triple at most
    elif name == "encode" or name == "decode":
        check_chars(limits, len(text) * _codec_growth(name, text, args, kwargs) + 4)
    elif name == "hex":
        check_chars(limits, 3 * len(text))
    elif name == "splitlines":
        check_items(limits, line_count(text, limits.max_items))
    elif name == "maketrans" and args:
        check_items(limits, max((len(a) for a in args if isinstance(a, (str, bytes, Mapping))), default=0))
    return None


def line_count(text, cap: int) -> int:
    """An upper bound on len(text.splitlines()), counted without building the lines; the counting stops
    once past `cap` (each mark is one scan of the text, the common ones first)."""
    count = 1
    for mark in (_LINE_BREAKS if isinstance(text, str) else (b"\n", b"\r")):
        count += text.count(mark)
        if count > cap:
            break
    return count


def check_words(limits: Limits, text: str, extra_separators: str = "") -> None:
    """Filters that split text into words and separators in one C call (wordwrap, title, urlize,
    striptags) may build a few objects per word: the words are counted first, with at most a quarter
    of max_items ever built for the count."""
    cap = limits.max_items // 4
    if len(text) <= cap:
        return
    words = len(text.split(None, cap)) + sum(text.count(mark) for mark in extra_separators)
    if words > cap:
        refuse("a text of words (words)", words, cap)


_CASE_METHODS = frozenset({"upper", "lower", "title", "capitalize", "swapcase", "casefold"})
_LINE_BREAKS = ("\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
# output units per input character, worst case: 'namereplace' writes \N{...} names of up to 88 characters
_ERROR_GROWTH = {"strict": 1, "ignore": 1, "replace": 3, "surrogateescape": 4, "surrogatepass": 4,
                 "xmlcharrefreplace": 10, "backslashreplace": 10, "namereplace": 100}
_CODEC_GROWTH = {"utf-8": 4, "utf-16": 4, "utf-16-le": 4, "utf-16-be": 4, "utf-32": 4, "utf-32-le": 4,
                 "utf-32-be": 4, "ascii": 1, "latin-1": 1, "iso8859-1": 1, "unicode-escape": 10,
                 "raw-unicode-escape": 10}
_QUADRATIC_CODECS = frozenset({"punycode", "idna"})
_QUADRATIC_MAX_CHARS = 4096


def _codec_growth(name: str, text, args: tuple, kwargs: dict) -> int:
    """How many output units one input unit of str.encode / bytes.decode can become, at most."""
    encoding = args[0] if args else kwargs.get("encoding", "utf-8")
    errors = args[1] if len(args) > 1 else kwargs.get("errors", "strict")
    try:
        codec = codecs.lookup(encoding).name if isinstance(encoding, str) else "utf-8"
    except LookupError:
        return 1   # the call itself raises the LookupError
    if codec in _QUADRATIC_CODECS:
        return _QUADRATIC_MAX_CHARS   # punycode is quadratic in time: only short text may use it
    if name == "encode" and codec in _ASCII_GROWTH and text.isascii():
        return _ASCII_GROWTH[codec]   # the common case, exact: no character can fail
    growth = _CODEC_GROWTH.get(codec, 8)   # stateful CJK codecs add escape sequences per switch
    return max(growth, _ERROR_GROWTH.get(errors, 100) if isinstance(errors, str) else 100)


_ASCII_GROWTH = {"utf-8": 1, "ascii": 1, "latin-1": 1, "iso8859-1": 1, "utf-16": 2, "utf-16-le": 2,
                 "utf-16-be": 2, "utf-32": 4, "utf-32-le": 4, "utf-32-be": 4}


def bounded_split(limits: Limits, name: str, text, args: tuple, kwargs: dict):
    """text.split/rsplit(*args, **kwargs) building at most max_items pieces (each may be a fresh object),
    or None when the caller may run the call itself (its piece count was counted and fits)."""
    separator = args[0] if args else kwargs.get("sep")
    maxsplit = args[1] if len(args) > 1 else kwargs.get("maxsplit", -1)
    if not isinstance(maxsplit, int):
        return None
    if isinstance(separator, (str, bytes)) and separator:
        pieces = text.count(separator) + 1
        if maxsplit >= 0:
            pieces = min(pieces, maxsplit + 1)
        check_items(limits, pieces)
        return None
    cap = limits.max_items
    parts = getattr(text, name)(separator, cap if maxsplit < 0 else min(maxsplit, cap))
    if len(parts) > cap and (maxsplit < 0 or maxsplit > cap):
        refuse("a list", len(parts), cap)
    return parts


def check_to_bytes(limits: Limits, args: tuple, kwargs: dict) -> None:
    length = args[0] if args else kwargs.get("length", 1)
    if isinstance(length, int):
        check_chars(limits, length)


_STRIP_WORK = 1 << 28    # comparisons one strip(chars) may make: a few tenths of a second in one C call
_STRIP_DEDUPLICATED = 1 << 16


def strip_chars(limits: Limits, text, chars):
    """The `chars` of text.strip/lstrip/rstrip(chars), priced: each character stripped is looked up in
    `chars` by one scan in C, so len(text) x len(chars) comparisons at worst, all in one call that no
    budget can stop. Over the bound a short `chars` is deduplicated (strip reads it as a set) and priced
    again; what is still over is refused."""
    if not isinstance(chars, (str, bytes)) or len(text) * len(chars) <= _STRIP_WORK:
        return chars
    if len(chars) <= _STRIP_DEDUPLICATED:
        chars = "".join(dict.fromkeys(chars)) if isinstance(chars, str) else bytes(dict.fromkeys(chars))
    if len(text) * len(chars) > _STRIP_WORK:
        refuse("a strip's comparisons", len(text) * len(chars), _STRIP_WORK)
    return chars


def bounded_list(limits: Limits, iterable) -> list:
    """list(iterable), refused past max_items before it is built (a str's characters are checked by length:
    each astral character becomes its own object)."""
    if isinstance(iterable, (str, bytes)):
        check_items(limits, len(iterable))
        return list(iterable)
    if isinstance(iterable, (list, tuple, Mapping)):
        return list(iterable)        # a copy of references: no larger than what exists
    parts = list(islice(iterable, limits.max_items + 1))
    check_items(limits, len(parts))
    return parts


def json_string_size(text: str, room: int, ensure_ascii: bool = False) -> int:
    """len(json.dumps(text)), bounded quickly (escapes: a control character becomes 6, an astral one 12)."""
    plain = len(text) + 2 + text.count('"') + text.count("\\")
    if text.isascii() and text.isprintable():
        return plain
    worst = len(text) * (12 if ensure_ascii and not text.isascii() else 6) + 2
    if worst <= room:
        return worst
    if not ensure_ascii and text.isprintable():
        return plain
    # measured piecewise: never more than one piece's escaped copy alive
    return sum(len(json.dumps(text[at:at + 65536], ensure_ascii=ensure_ascii)) - 2
               for at in range(0, len(text), 65536)) + 2


def bounded_json(limits: Limits, value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """json.dumps(value, ...), exactly, with the output size bounded. The caller has weighed `value` with
    json_string_size; without indent or separators the C encoder then runs, otherwise the Python
    encoder's chunks are counted as they come, so an indent bomb stops at the limit instead of after
    allocating it."""
    if indent is None and separators is None:
        text = json.dumps(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
        check_chars(limits, len(text))
        return text
    indent_size = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    separator_size = sum(len(s) for s in separators if isinstance(s, str)) if isinstance(separators, (list, tuple)) else 0
    if max(indent_size, separator_size) > limits.max_json_indent:
        refuse("a JSON indent or separator", max(indent_size, separator_size), limits.max_json_indent)
    encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    if isinstance(value, str):
        return encoder.encode(value)
    chunks, size, limit = [], 0, limits.max_output_chars
    for chunk in encoder.iterencode(value):
        size += len(chunk)
        if size > limit:
            refuse("a JSON dump", size, limit)
        chunks.append(chunk)
    return "".join(chunks)
