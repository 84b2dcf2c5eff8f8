"""Size checks that run BEFORE an operation allocates its result.

jinja2's sandbox stops a template from reaching Python internals but not from asking for `'a' * 10**9`,
`' '.center(10**9)`, `'%*s' % (10**9, '')` or `2 ** 10**9`: each is one C call that allocates (or computes)
before any timer can interrupt it. Every operation whose result can be much larger than its inputs is
therefore priced here first, from the lengths and numbers it was given, and refused over the limit.
Operations whose result is linear in their inputs (upper, split, slicing, ...) need no check: their inputs
were already bounded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import TemplateLimitError


@dataclass(frozen=True)
class Limits:
    """The bounds of one render. The defaults fit every real template with a million-token chat."""

    max_template_chars: int = 256 * 1024       # refused before compiling
    time_budget: float = 1.0                   # seconds for compile + render, enforced by the watchdog
    max_output_chars: int = 16 * 1024 * 1024   # the whole output, and any one string, list or JSON dump
    max_items: int = 1_000_000                 # one list or tuple built by repetition or concatenation
    max_int_bits: int = 1 << 16                # one integer (Python can't print more than 4300 digits anyway)
    max_memory_bytes: int = 512 * 1024 * 1024  # growth of the process' resident memory during one render
    max_json_indent: int = 256                 # tojson indent and separator lengths


def refuse(what: str, size: int, limit: int):
    raise TemplateLimitError(f"template asked for {what} of size {size:,}, over the limit of {limit:,}")


def check_binop(limits: Limits, operator: str, left, right) -> None:
    """Price `left <operator> right` for the intercepted operators * ** + %."""
    if operator == "*":
        if isinstance(right, int) and isinstance(left, (str, bytes, list, tuple)):
            _check_repeat(limits, left, right)
        elif isinstance(left, int) and isinstance(right, (str, bytes, list, tuple)):
            _check_repeat(limits, right, left)
        elif isinstance(left, int) and isinstance(right, int):
            bits = left.bit_length() + right.bit_length()
            if bits > limits.max_int_bits:
                refuse("an integer product (bits)", bits, limits.max_int_bits)
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            bits = (abs(left).bit_length() - 1) * right
            if bits > limits.max_int_bits:
                refuse("an integer power (bits)", bits, limits.max_int_bits)
    elif operator == "+":
        if isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
            check_chars(limits, len(left) + len(right))
        elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            check_items(limits, len(left) + len(right))
    elif operator == "%" and isinstance(left, str):
        check_chars(limits, percent_format_size(left, right))


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


def percent_format_size(template: str, values) -> int:
    """An upper bound on the length of `template % values`, computed from the widths, precisions and values.

    The exact size is not needed, only a bound that can't be fooled: a width or precision counts in full,
    a number by its digits, anything else by its str()."""
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
        size += width + precision + _rendered_size(value)
    return size


def _number(value) -> int:
    try:
        return abs(int(value)) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def _rendered_size(value) -> int:
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if isinstance(value, float):
        return 330
    return len(str(value))


# [[fill]align][sign][z][#][0][width][grouping][.precision][type]
_FORMAT_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?[a-zA-Z%]?", re.S)


def format_field_size(value, spec: str) -> int:
    """An upper bound on the length of format(value, spec) for str.format's fields."""
    match = _FORMAT_SPEC.fullmatch(spec)
    width = int(match.group(1) or 0) if match else len(spec)
    precision = int(match.group(2) or 0) if match else 0
    return width + precision + _rendered_size(value)


def check_str_method(limits: Limits, name: str, text, args: tuple, kwargs: dict):
    """Price a call of str/bytes method `name` on `text`. Returns the joined list for `join` (its iterable
    is consumed here), else None."""
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
        if isinstance(old, type(text)) and isinstance(new, type(text)) and len(new) > len(old):
            hits = text.count(old) if old else len(text) + 1
            if isinstance(count, int) and count >= 0:
                hits = min(hits, count)
            check_chars(limits, len(text) + hits * (len(new) - len(old)))
    elif name == "join" and len(args) == 1 and not kwargs:
        parts = list(args[0])
        check_items(limits, len(parts))
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
    return None


def check_to_bytes(limits: Limits, args: tuple, kwargs: dict) -> None:
    length = args[0] if args else kwargs.get("length", 1)
    if isinstance(length, int):
        check_chars(limits, length)


def json_size_bound(limits: Limits, value) -> int:
    """A quick estimate of a compact JSON dump's size (string lengths, 24 per number, 2 per container
    item), walked iteratively and abandoned as soon as it is over the limit."""
    size, stack, visits = 0, [value], 0
    visit_limit = 4 * limits.max_items
    while stack:
        item = stack.pop()
        visits += 1
        if visits > visit_limit:
            refuse("a JSON dump (nodes)", visits, visit_limit)
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, Mapping):
            size += 2 + 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            size += 2 + 2 * len(item)
            stack.extend(item)
        else:
            size += 24
        if size > limits.max_output_chars:
            refuse("a JSON dump", size, limits.max_output_chars)
    return size


def bounded_json(limits: Limits, value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """json.dumps(value, ...), exactly, with the output size bounded. Without indent or separators the
    C encoder runs after a size estimate; otherwise the Python encoder's chunks are counted as they come,
    so an indent bomb stops at the limit instead of after allocating it."""
    if indent is None and separators is None:
        json_size_bound(limits, value)
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
