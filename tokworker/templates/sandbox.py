"""The Jinja environment chat templates run in: transformers' environment, plus bounds.

What transformers sets up, reproduced so that output is identical: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; the `{% generation %}` tag; raise_exception, strftime_now, a
tojson that keeps non-ASCII and takes indent/separators/sort_keys; `dict` (call and fromkeys only) and a
`namespace` that refuses underscore names.

What it adds, because the sandbox bounds nothing:
- every arithmetic operator is intercepted (which also stops Jinja from folding it at compile time) and
  priced before it runs, integers included; `~`, macro bodies, block sets and filter blocks join through
  a bounded concat;
- everything a template prints, joins or formats becomes text through reprs.shown_str (priced, no
  addresses): the output's finalize, `~`, `%`, str.format and the string-making filters;
- comparisons, `in`, subscripts and computed dict keys are priced by weighing the values they would walk
  or hash in C;
- str/bytes methods that grow their result or build many objects, int.to_bytes / from_bytes, fromkeys,
  list.count / index and loop.changed are priced in the sandbox's call hook (Markup, which escapes what it
  is given, against a fifth of the limit); filters and tests are filters.py's;
- lipsum is capped. Time, memory and total output are enforced by render.py (watchdog + counted output).
"""

from __future__ import annotations

import contextvars
import dataclasses
import operator
from collections.abc import Mapping
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import Namespace, generate_lorem_ipsum
from markupsafe import Markup

from . import bounds, filters, reprs
from .codegen import BoundedCodeGenerator
from .bounds import Limits
from .errors import TemplateLimitError, TemplateRaisedError, TemplateSecurityError
from .owned import Owned, joined, stripped


def _require_jinja2() -> None:
    version = tuple(int(part) for part in jinja2.__version__.split(".")[:3] if part.isdigit())
    if version < (3, 1, 6):
        raise ImportError(f"tokworker's chat templates need jinja2>=3.1.6 (older versions have known sandbox "
                          f"escapes, CVE-2025-27516); installed: {jinja2.__version__}")


_require_jinja2()

#: The moment strftime_now reports, per render (None: the current time).
RENDER_NOW: contextvars.ContextVar[datetime | None] = contextvars.ContextVar("tokworker_render_now", default=None)


def raise_exception(message):
    raise TemplateRaisedError(message)



class TemplateDict:
    """`dict` as templates see it: callable and fromkeys, and nothing a template could use to reach
    the type itself. Keys are hashed in C, so they are counted and weighed first."""

    def __init__(self, limits: Limits):
        self._limits = limits

    def __call__(self, *args, **kwargs):
        if len(args) != 1 or isinstance(args[0], Mapping):
            return dict(*args, **kwargs)          # a copy of a dict takes its hashes along
        built = built_dict(bounded_keys(self._limits, args[0]))
        built.update(kwargs)
        return built

    def fromkeys(self, iterable, value=None):
        return built_dict((key, value) for key in bounded_keys(self._limits, iterable))


def bounded_keys(limits: Limits, iterable) -> list:
    keys = bounds.bounded_list(limits, iterable)
    reprs.weigh(keys, limits, "the keys of a dict")
    return keys


def built_dict(pairs) -> dict:
    """A dict from (key, value) pairs, one insertion at a time: with keys that all hash alike (integers
    2**61 - 1 apart) each insertion is a C scan of the keys before it, which the budget can stop between
    two; dict() or fromkeys building it in one C call ran 23-60 s."""
    built = {}
    for key, value in pairs:
        built[key] = value
    return built


class TemplateNamespace(Namespace):
    """Jinja's namespace, refusing names that start with an underscore (they lead to internals)."""

    def __init__(*args, **kwargs):  # noqa: N805 - Jinja's own signature, so namespace(self=...) works
        self, args = args[0], args[1:]
        if args and not isinstance(args[0], Mapping):   # pairs: a key that is not a name would be hashed in C
            args = ([(TemplateNamespace._check_key(key), value) for key, value in args[0]],) + args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_key(key):
        if not isinstance(key, str):
            raise TemplateSecurityError(f"a namespace attribute name must be a string, not {type(key).__name__}")
        return key

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise TemplateSecurityError(f"a template may not store the underscore name {name!r} on a namespace")


class GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` (assistant-mask markers): renders its body like
    transformers does when it is not tracking, as a call block, so its scoping is the same."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


class _BoundedFormatter(SandboxedFormatter):
    """str.format inside the sandbox, with every field priced before it is formatted."""

    def __init__(self, environment, limits: Limits):
        super().__init__(environment)
        self._limits, self._size = limits, 0

    def convert_field(self, value, conversion):
        if conversion == "s":
            return reprs.shown_str(value, self._limits)
        if conversion == "r":
            return reprs.shown_repr(value, self._limits)
        if conversion == "a":
            bounds.check_chars(self._limits, 10 * reprs.weigh(value, self._limits))
            return ascii(reprs.shown_repr(value, self._limits))[1:-1]
        return super().convert_field(value, conversion)

    def format_field(self, value, format_spec):
        self._size += bounds.format_field_size(value, format_spec, self._weigh)
        bounds.check_chars(self._limits, self._size)
        return format(reprs.plain_for_formatting(value, self._limits), format_spec)

    def _weigh(self, value):
        return reprs.weigh(value, self._limits)


_STATIC_MAKETRANS = (str.maketrans, bytes.maketrans)
_STRIPS = frozenset({"strip", "lstrip", "rstrip"})
_TEXT = frozenset({str, Owned})
_LINEAR_INT_OPERATORS = frozenset({"+", "-", "/", "//", "%"})   # results no larger than the operands (+1 bit)
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b}
_WALKED = (list, tuple, dict, set, frozenset)
_HASHED = (dict, set, frozenset, type({}.keys()), type({}.items()))
_DICT_NAMES = frozenset(dir(dict))


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment configured as transformers configures it, with `limits` enforced."""

    code_generator_class = BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "-", "/", "//", "%"})

    def __init__(self, limits: Limits):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
        self.limits = limits
        # Markup escapes what it is combined with (`<` becomes `&lt;`, up to 5x): priced against a fifth
        self.markup_limits = dataclasses.replace(limits, max_output_chars=limits.max_output_chars // 5)
        self.finalize = self._finalize_output
        self.filters.update(filters.bounded_filters(limits, self.percent))
        self.tests.update(filters.bounded_tests(self.compare))
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = self.strftime_now
        self.globals["dict"] = TemplateDict(limits)
        self.globals["namespace"] = TemplateNamespace
        self.globals["lipsum"] = self._lipsum

    # -- attributes
    def getattr(self, obj, attribute):
        """`message.role` on a plain dict: what Jinja's getattr returns, without the AttributeError it raises
        and catches first on every such read (a fifth of a chat's render). A plain dict has no attribute
        that its class lacks, so only names of dict's own go the attribute way (and its safety checks)."""
        if type(obj) is dict and attribute not in _DICT_NAMES:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    # -- text
    def _finalize_output(self, value):
        """What `{{ value }}` prints: text, priced and without addresses (the template's own kept as such)."""
        kind = type(value)
        if kind is str or kind is Owned:
            return value
        return str(reprs.shown_str(value, self.limits))

    def percent(self, template: str, values):
        """template % values, priced first; non-plain values are shown through reprs."""
        limits = self.limits
        text = template if isinstance(template, str) else template.decode("latin-1")
        size = bounds.percent_format_size(text, values, self._weigh)
        bounds.check_chars(limits, 5 * size if isinstance(template, Markup) else size)
        if isinstance(values, tuple):
            values = tuple([reprs.plain_for_formatting(value, limits) for value in values])
        elif isinstance(values, Mapping):
            values = _ShownMapping(values, limits)
        else:
            values = reprs.plain_for_formatting(values, limits)
        return template % values

    def _weigh(self, value):
        return reprs.weigh(value, self.limits)

    # -- operators, comparisons and joins
    def call_binop(self, context, operator, left, right):
        kind = type(left)
        if kind in _TEXT and type(right) in _TEXT:   # the common cases, priced inline: joining two strings,
            if operator == "+" and len(left) + len(right) <= self.limits.max_output_chars:   # small integers
                return left + right
        elif kind is type(right):
            if kind is int and operator in _LINEAR_INT_OPERATORS:
                if left.bit_length() <= self.limits.max_int_bits >= right.bit_length():
                    return self.binop_table[operator](left, right)
        if operator == "%" and isinstance(left, (str, bytes)):
            return self.percent(left, right)
        limits = self.markup_limits if isinstance(left, Markup) or isinstance(right, Markup) else self.limits
        bounds.check_binop(limits, operator, left, right)
        return self.binop_table[operator](left, right)

    def compare(self, left, operator, right):
        """left <operator> right, with any walk over containers priced first."""
        if type(right) is not str:   # against a str, nothing is walked: a substring search or a type mismatch
            if operator == "in" or operator == "not in":
                self._price_search(left, right)
            elif isinstance(left, _WALKED) and isinstance(right, _WALKED):
                try:
                    reprs.weigh(left, self.limits, "a comparison")
                except TemplateLimitError:
                    reprs.weigh(right, self.limits, "a comparison")
        return _COMPARE[operator](left, right)

    def bounded_dict(self, pairs):
        """A dict literal of many items, one insertion at a time (see built_dict)."""
        return built_dict((self.hashed_key(key), value) for key, value in pairs)

    def hashed_key(self, key):
        if isinstance(key, (tuple, frozenset)):
            reprs.weigh(key, self.limits, "a hashed key")
        return key

    def compare_chain(self, left, *rest):
        for at in range(0, len(rest), 2):
            if not self.compare(left, rest[at], rest[at + 1]):
                return False
            left = rest[at + 1]
        return True

    def _price_search(self, needle, haystack) -> None:
        """`needle in haystack` compares needle with each item (lists) or hashes it (dicts, sets)."""
        limits = self.limits
        if isinstance(haystack, (list, tuple)):
            if isinstance(needle, (str, int, float)) or needle is None:
                cheap = len(haystack) * (len(needle) + 1 if isinstance(needle, str) else 1)
                if cheap <= limits.max_output_chars:
                    return
            reprs.weigh(haystack, limits, "a search")
        elif isinstance(haystack, _HASHED) and isinstance(needle, (tuple, frozenset)):
            reprs.weigh(needle, limits, "a hashed key")

    def concat(self, parts):
        """Joins macro bodies, block sets and filter blocks (Jinja's `environment.concat`)."""
        if not isinstance(parts, list):
            parts = self._collect(parts)
        bounds.check_chars(self.limits, sum(map(len, parts)))
        return joined(parts)

    def bounded_str_join(self, values):
        """`a ~ b ~ ...`"""
        limits = self.limits
        parts = [value if type(value) in _TEXT else reprs.shown_str(value, limits) for value in values]
        bounds.check_chars(self.limits, sum(map(len, parts)))
        return joined(parts)

    def _collect(self, chunks):
        parts, size, limit = [], 0, self.limits.max_output_chars
        for chunk in chunks:
            size += len(chunk)
            if size > limit:
                bounds.refuse("a string", size, limit)
            parts.append(chunk)
        return parts

    # -- calls
    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - the sandbox's own signature
        owner = getattr(__obj, "__self__", None)
        if __obj in _STATIC_MAKETRANS:   # a static method: reached from an instance, it has no __self__
            bounds.check_str_method(__self.limits, "maketrans", "", args, kwargs)
        elif owner is not None and not isinstance(owner, (TemplateDict, Namespace)):
            name = getattr(__obj, "__name__", None)
            limits = __self.markup_limits if isinstance(owner, Markup) else __self.limits
            if isinstance(owner, (str, bytes)):
                if name in bounds.GROWING_TEXT_METHODS and __self.is_safe_callable(__obj):
                    parts = bounds.check_str_method(limits, name, owner, args, kwargs)
                    if parts is not None:
                        if type(owner) in _TEXT:
                            return joined(parts, owner)
                        args = (parts,)
                elif name in _STRIPS and len(args) <= 1 and not kwargs and __self.is_safe_callable(__obj):
                    return stripped(owner, name, bounds.strip_chars(limits, owner, args[0] if args else None))
                elif name in ("split", "rsplit") and __self.is_safe_callable(__obj):
                    parts = bounds.bounded_split(limits, name, owner, args, kwargs)
                    if parts is not None:
                        return parts
                elif name in ("startswith", "endswith") and args and isinstance(args[0], tuple):
                    reprs.weigh(args[0], limits, "the prefixes tried")   # each one compared in C
            elif isinstance(owner, int) and name == "to_bytes":
                bounds.check_to_bytes(limits, args, kwargs)
            elif owner is int and name == "from_bytes" and args and hasattr(args[0], "__len__"):
                if 8 * len(args[0]) > limits.max_int_bits:
                    bounds.refuse("an integer (bits)", 8 * len(args[0]), limits.max_int_bits)
            elif isinstance(owner, (list, tuple)) and name in ("count", "index") and args:
                __self._price_search(args[0], owner)
            elif name == "fromkeys" and args and len(args) <= 2 and not kwargs:
                value = args[1] if len(args) == 2 else None
                return built_dict((key, value) for key in bounded_keys(limits, args[0]))
            elif isinstance(owner, dict) and name == "get" and args:
                __self._price_search(args[0], owner)
            elif isinstance(owner, LoopContext) and name == "changed":
                reprs.weigh(args, limits, "a loop.changed comparison")
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value):
        """str.format / str.format_map reached from a template: sandboxed field lookup, bounded fields."""
        if getattr(value, "__name__", None) not in ("format", "format_map"):
            return None
        owner = getattr(value, "__self__", None)
        if not isinstance(owner, str) or not callable(value):
            return None
        is_format_map = value.__name__ == "format_map"
        environment, text_type = self, type(owner)

        def bounded_format(*args, **kwargs):
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one positional argument")
                args, kwargs = (), args[0]
            formatter = _BoundedFormatter(environment, environment.limits)
            return text_type(formatter.vformat(owner, args, kwargs))

        return bounded_format

    def strftime_now(self, format):  # noqa: A002 - transformers' parameter name
        """The render's moment as `format` says, priced first: a directive writes at most 32 characters
        (`%c` writes 24 for 2), and 8M of them asked for 192M characters."""
        if isinstance(format, str):
            bounds.check_chars(self.limits, len(format) + 32 * format.count("%"))
        return (RENDER_NOW.get() or datetime.now()).strftime(format)

    def _lipsum(self, n=5, html=True, min=20, max=100):  # noqa: A002 - Jinja's parameter names
        bounds.check_items(self.limits, int(n) * int(max))
        return generate_lorem_ipsum(n, html, min, max)


class _ShownMapping(Mapping):
    """A `%` mapping whose values are shown through reprs (and itself, for a bare `%s`)."""

    def __init__(self, mapping, limits: Limits):
        self._mapping, self._limits = mapping, limits

    def __getitem__(self, key):
        return reprs.plain_for_formatting(self._mapping[key], self._limits)

    def __iter__(self):
        return iter(self._mapping)

    def __len__(self):
        return len(self._mapping)

    def __str__(self):
        return reprs.shown_str(self._mapping, self._limits)

    __repr__ = __str__
