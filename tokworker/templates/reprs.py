"""str() and repr() as templates see them: priced before they are built, and never showing an address.

Python builds the repr of a container in one C call: `(['x' * 10**7] * 10**6)|string` asks for 10**13
characters before any timer can act, and the repr of a function, generator or bound method shows its
memory address. So every str()/repr() a template can reach (output, `~`, `%`, format, the string-making
filters) goes through here: `weigh` walks the value (counting shared items every time they are reached,
so sharing can't hide a size) and refuses it over the limit, then `shown_str`/`shown_repr` build exactly
what Python would for plain data, and an address-free `<...>` for any other object.

`weigh` is also the price of anything else that walks a value in C (comparisons, `in`, sorting, hashing).
"""

from __future__ import annotations

from jinja2.runtime import LoopContext, Macro, Undefined
from jinja2.utils import Namespace

from .bounds import Limits, refuse

_NUMBERS = (bool, int, float)
_PLAIN_SEQUENCES = (list, tuple)
_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_CHUNK = 1 << 16


def str_repr_size(text, limit: int) -> int:
    """An upper bound on len(repr(text)) (a str or bytes), exact enough not to refuse what fits."""
    quotes = 3 + text.count("\\" if isinstance(text, str) else b"\\") + text.count("'" if isinstance(text, str) else b"'")
    if isinstance(text, str) and text.isprintable():
        return len(text) + quotes
    worst = len(text) * (4 if text.isascii() else 10)
    if worst + quotes <= limit:
        return worst + quotes
    # rare and over the quick bound: measure it piecewise, never holding more than one piece's repr
    return sum(len(repr(text[at:at + _CHUNK])) for at in range(0, len(text), _CHUNK)) + quotes


def weigh(value, limits: Limits, what: str = "a repr") -> int:
    """An upper bound on the repr size of `value`, which also bounds the work of any C walk over it.
    Refused as soon as it passes the output limit; items are counted every time they are reached."""
    limit = limits.max_output_chars
    size, stack = 0, [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or kind is bytes:
            size += str_repr_size(item, limit)
        elif kind is int:
            size += item.bit_length() // 3 + 2
        elif kind is float or kind is bool or item is None:
            size += 24
        elif isinstance(item, dict):
            size += 2 + 4 * len(item)
            if size > limit:
                break
            extend(item.keys())
            extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset) + _DICT_VIEWS):
            size += 16 + 2 * len(item)
            if size > limit:
                break
            extend(item)
        elif isinstance(item, Namespace):
            size += 13
            push(_namespace_attrs(item))
        elif isinstance(item, str):
            size += str_repr_size(item, limit) + 10
        else:
            size += 64
        if size > limit:
            break
    if size > limit:
        refuse(what, size, limit)
    return size


def shown_str(value, limits: Limits) -> str:
    """str(value) as a template sees it (priced; no addresses)."""
    if isinstance(value, str):
        return value
    if isinstance(value, _NUMBERS) or value is None or isinstance(value, Undefined):
        return str(value)
    weigh(value, limits)
    return _repr(value, set())


def shown_repr(value, limits: Limits) -> str:
    """repr(value) as a template sees it (priced; no addresses)."""
    if isinstance(value, _NUMBERS) or value is None:
        return repr(value)
    weigh(value, limits)
    return _repr(value, set())


def _repr(value, open_ids: set) -> str:
    if isinstance(value, (str, bytes) + _NUMBERS) or value is None:
        return repr(value)
    if isinstance(value, (list, tuple, dict, set, frozenset, Namespace) + _DICT_VIEWS):
        if id(value) in open_ids:   # a cycle, shown as Python shows it
            return "[...]" if isinstance(value, list) else "{...}" if isinstance(value, dict) else "..."
        open_ids.add(id(value))
        try:
            return _container_repr(value, open_ids)
        finally:
            open_ids.discard(id(value))
    if isinstance(value, (range, Undefined, LoopContext, Macro)):
        return repr(value)          # jinja's own reprs show no address
    name = getattr(value, "__name__", None)
    if callable(value):
        return f"<callable {name}>" if isinstance(name, str) else f"<callable {type(value).__name__}>"
    if hasattr(value, "__next__"):
        return "<iterator>"
    return f"<{type(value).__name__} object>"


def _container_repr(value, open_ids: set) -> str:
    if isinstance(value, list):
        return "[" + ", ".join([_repr(item, open_ids) for item in value]) + "]"
    if isinstance(value, tuple):
        inner = ", ".join([_repr(item, open_ids) for item in value])
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join([_repr(k, open_ids) + ": " + _repr(v, open_ids) for k, v in value.items()]) + "}"
    if isinstance(value, Namespace):
        return "<Namespace " + _repr(_namespace_attrs(value), open_ids) + ">"
    items = ", ".join([_repr(item, open_ids) for item in value])
    if isinstance(value, (set, frozenset)):
        if not value:
            return f"{type(value).__name__}()"
        return "{" + items + "}" if isinstance(value, set) else "frozenset({" + items + "})"
    return f"{type(value).__name__}([{items}])"   # dict_keys([...]) and the other views


def _namespace_attrs(namespace: Namespace) -> dict:
    return namespace._Namespace__attrs  # noqa: SLF001 - jinja's own storage, read to show it as jinja does


class Shown:
    """Stands in for a non-plain value handed to `%` or str.format, so the C formatter shows it through
    shown_str/shown_repr (already priced by the caller) instead of its own repr."""

    __slots__ = ("value", "limits")

    def __init__(self, value, limits: Limits):
        self.value, self.limits = value, limits

    def __str__(self):
        return shown_str(self.value, self.limits)

    def __repr__(self):
        return shown_repr(self.value, self.limits)

    def __format__(self, spec):
        if spec:
            raise TypeError(f"unsupported format string passed to {type(self.value).__name__}.__format__")
        return shown_str(self.value, self.limits)


def plain_for_formatting(value, limits: Limits):
    """value itself when the C formatter shows it safely (str and numbers), else a Shown stand-in."""
    if isinstance(value, (str, bytes) + _NUMBERS) or value is None:
        return value
    return Shown(value, limits)
