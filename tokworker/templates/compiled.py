"""Compiling templates, once: size cap first, compile under the watchdog, cache bounded in bytes.

A cache bounded by entry count can still hold gigabytes (one template may be 256 KB of source and several
MB of generated code); this one prices each entry by its source and generated Python and evicts the least
recently used entries past a byte budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import jinja2
from jinja2 import nodes

from .bounds import Limits, refuse
from .errors import TemplateSyntaxError, TemplateTooLargeError
from .sandbox import BoundedEnvironment

CACHE_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class CompiledTemplate:
    template: jinja2.Template
    cost: int            # estimated bytes held


class ByteBoundedCache:
    """LRU mapping whose entries carry a cost in bytes; the total stays under max_bytes."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.total = max_bytes, 0
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key, entry: CompiledTemplate) -> None:
        if entry.cost > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self.total -= previous.cost
            self._entries[key] = entry
            self.total += entry.cost
            while self.total > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.total -= evicted.cost

    def __len__(self):
        return len(self._entries)


CACHE = ByteBoundedCache(CACHE_MAX_BYTES)
_ENVIRONMENTS: dict[Limits, BoundedEnvironment] = {}
_MAX_ENVIRONMENTS = 16


def environment_for(limits: Limits) -> BoundedEnvironment:
    environment = _ENVIRONMENTS.get(limits)
    if environment is None:
        if len(_ENVIRONMENTS) >= _MAX_ENVIRONMENTS:
            _ENVIRONMENTS.clear()
        environment = _ENVIRONMENTS[limits] = BoundedEnvironment(limits)
    return environment


def check_size(source: str, limits: Limits) -> None:
    if not isinstance(source, str):
        raise TemplateSyntaxError(f"a chat template must be a string, not {type(source).__name__}")
    if len(source) > limits.max_template_chars:
        raise TemplateTooLargeError(f"chat template of {len(source):,} characters is over the limit of "
                                    f"{limits.max_template_chars:,}")


def cached(source: str, limits: Limits) -> CompiledTemplate | None:
    return CACHE.get((limits, source))


def compile_template(source: str, limits: Limits) -> CompiledTemplate:
    """Parse and compile (the caller runs this under the watchdog); the result is cached."""
    environment = environment_for(limits)
    try:
        tree = environment.parse(source)
        _check_integer_literals(tree, limits)
        python = environment.compile(tree, raw=True)
        code = compile(python, "<template>", "exec")
    except jinja2.TemplateSyntaxError as error:
        raise TemplateSyntaxError(f"line {error.lineno}: {error.message}") from None
    template = environment.template_class.from_code(environment, code, environment.make_globals(None))
    entry = CompiledTemplate(template, 4 * len(source) + 3 * len(python))
    CACHE.put((limits, source), entry)
    return entry


def _check_integer_literals(tree: nodes.Template, limits: Limits) -> None:
    """An integer literal (`0xfff...` is linear to parse, so Python's digit limit doesn't cover it) gets the
    same bit cap as integers made while rendering."""
    for node in tree.find_all(nodes.Const):
        if isinstance(node.value, int) and node.value.bit_length() > limits.max_int_bits:
            refuse("an integer literal (bits)", node.value.bit_length(), limits.max_int_bits)
