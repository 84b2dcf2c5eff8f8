"""str() and repr() as templates see them: priced before they are built, and never showing an address.

Python builds the repr of a container in one C call: `(['x' * 10**7] * 10**6)|string` asks for 10**13
characters before any timer can act, and the repr of a function, generator or bound method shows its
memory address. So every str()/repr() a template can reach (output, `~`, `%`, format, the string-making
filters) goes through here: `weigh` walks the value (counting shared items every time they are reached,
so sharing can't hide a size) and refuses it over the limit, then `shown_str`/`shown_repr` build exactly
what Python would for plain data, and an address-free `<...>` for any other object.

`weigh` is also the price of anything else that walks a value in C (comparisons, `in`, sorting, hashing),
and refuses values nested deeper than MAX_DEPTH: hashing recurses in C without Python's recursion check.
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


def weigh(value, limits: Limits, what: str = "a repr", string_size=None) -> int:
    """An upper bound on the repr size of `value` (or its JSON size, given json_string_size as
    `string_size`), which also bounds the work of any C walk over it.

    Shared items count every time they are reached (a list nested by doubling 40 times weighs 2**40),
    but each container is weighed once, by identity, so the walk is linear in the distinct objects and
    stops as soon as a running sum passes the output limit. Small values get a quick bound instead."""
    limit = limits.max_output_chars
    string_size = string_size or str_repr_size
    if not isinstance(value, _CONTAINERS):
        size = _leaf_weight(value, limit, string_size)
    elif (size := _small_weight(value, limit)) is not None:
        pass
    else:
        size = _shared_weight(value, limit, string_size, what)
    if size > limit:
        refuse(what, size, limit)
    return size


def _shared_weight(value, limit: int, string_size, what: str) -> int:
    """A depth-first walk that weighs each container once (by identity) and adds its weight wherever it
    is reached again; every open container keeps a running sum, so the walk stops as soon as one passes
    the limit."""
    weights: dict[int, int] = {}
    children = _children(value)
    frames = [[value, children, 0, 16 + 4 * len(children)]]
    open_ids = {id(value)}
    while frames:
        frame = frames[-1]
        item, children, index, size = frame
        descended = False
        while index < len(children):
            child = children[index]
            index += 1
            kind = type(child)
            if kind is int:
                size += child.bit_length() // 3 + 2
            elif kind not in _LEAVES and isinstance(child, _CONTAINERS):
                known = weights.get(id(child))
                if known is not None:
                    size += known
                elif id(child) in open_ids:
                    size += 8                      # a cycle, shown as `...`
                else:
                    frame[2], frame[3] = index, size
                    grandchildren = _children(child)
                    frames.append([child, grandchildren, 0, 16 + 4 * len(grandchildren)])
                    if len(frames) > MAX_DEPTH:        # hashing it would recurse that deep in C
                        refuse(f"{what}: nesting depth", len(frames), MAX_DEPTH)
                    open_ids.add(id(child))
                    descended = True
                    break
            elif kind is str and len(child) > _CHUNK:   # measured once, however often it is shared
                known = weights.get(id(child))
                if known is None:
                    known = weights[id(child)] = _leaf_weight(child, limit, string_size)
                size += known
            else:
                size += _leaf_weight(child, limit, string_size)
            if size > limit:
                refuse(what, size, limit)
        if descended:
            continue
        weights[id(item)] = size
        open_ids.discard(id(item))
        frames.pop()
        if frames:
            frames[-1][3] += size
            if frames[-1][3] > limit:
                refuse(what, frames[-1][3], limit)
    return weights[id(value)]


def _small_weight(value, limit: int) -> int | None:
    """A quick upper bound for a small value (what real templates weigh): a plain walk that counts every
    character as the longest escape it could become (12, `\\ud834\\udd1e` in JSON); None when that bound
    is over the limit or the value is large or unusual, where the exact walk by identity takes over."""
    size, stack, budget = 0, [value], _SMALL_VISITS
    while stack:
        item = stack.pop()
        budget -= 1
        if budget < 0:
            return None
        kind = type(item)
        if kind is str:
            size += 12 * len(item) + 3
        elif kind is dict:
            size += 16 + 8 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            size += 16 + 4 * len(item)
            stack.extend(item)
        elif kind is int:
            size += item.bit_length() // 3 + 2
        elif kind is float or kind is bool or item is None:
            size += 24
        else:
            return None   # bytes, views, namespaces...
        if size > limit:
            return None
    return size


_SMALL_VISITS = 4096   # also bounds the depth of what the quick walk passes
MAX_DEPTH = 1000       # containers in containers; hashing a 240,000-deep tuple overflowed the C stack
_CONTAINERS = (list, tuple, dict, set, frozenset, Namespace) + _DICT_VIEWS
_LEAVES = frozenset({str, bytes, int, float, bool, type(None)})


def _children(item) -> list:
    if isinstance(item, dict):
        return [*item.keys(), *item.values()]
    if isinstance(item, Namespace):
        return [_namespace_attrs(item)]
    return item if isinstance(item, (list, tuple)) else list(item)


def _leaf_weight(item, limit: int, string_size=str_repr_size) -> int:
    kind = type(item)
    if kind is str:
        return string_size(item, limit)
    if kind is bytes:
        return str_repr_size(item, limit)
    if kind is int:
        return item.bit_length() // 3 + 2
    if kind is float or kind is bool or item is None:
        return 24
    if isinstance(item, str):
        return string_size(item, limit) + 10
    return 64


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
