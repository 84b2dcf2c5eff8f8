"""The Jinja environment chat templates run in: transformers' environment, plus bounds.

What transformers sets up, reproduced so that output is identical: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; the `{% generation %}` tag; raise_exception, strftime_now, a
tojson that keeps non-ASCII and takes indent/separators/sort_keys; `dict` (call and fromkeys only) and a
`namespace` that refuses underscore names.

What it adds, because the sandbox bounds nothing:
- the operators * ** + % are intercepted (which also stops Jinja from folding them at compile time) and
  priced before they run; `~`, macro bodies, block sets and filter blocks join through a bounded concat;
- str/bytes methods that grow their result (center, ljust, rjust, zfill, expandtabs, replace, join,
  translate, format, format_map) and int.to_bytes are priced in the sandbox's call hook;
- the filters that grow their result (center, indent, wordwrap, format, join, replace, sum, batch, tojson)
  are bounded wrappers marked pass_context, so Jinja never runs them at compile time either;
- lipsum is capped. Time, memory and total output are enforced by render.py (watchdog + counted output).
"""

from __future__ import annotations

import contextvars
from datetime import datetime

import jinja2
from jinja2 import nodes, pass_context
from jinja2.compiler import CodeGenerator
from jinja2.ext import Extension, loopcontrols
from jinja2.filters import FILTERS, make_attrgetter
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import Namespace, generate_lorem_ipsum

from . import bounds
from .bounds import Limits
from .errors import TemplateRaisedError, TemplateSecurityError


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


def strftime_now(format):
    return (RENDER_NOW.get() or datetime.now()).strftime(format)


class TemplateDict:
    """`dict` as templates see it: callable and fromkeys, and nothing a template could use to reach
    the type itself."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(Namespace):
    """Jinja's namespace, refusing names that start with an underscore (they lead to internals)."""

    def __init__(*args, **kwargs):  # noqa: N805 - Jinja's own signature, so namespace(self=...) works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check(name)
        Namespace.__setitem__(self, name, value)

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


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` to the environment's bounded join instead of jinja2.runtime.str_join."""

    def visit_Concat(self, node, frame):
        self.write("environment.bounded_str_join((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class _BoundedFormatter(SandboxedFormatter):
    """str.format inside the sandbox, with every field priced before it is formatted."""

    def __init__(self, environment, limits: Limits):
        super().__init__(environment)
        self._limits, self._size = limits, 0

    def format_field(self, value, format_spec):
        self._size += bounds.format_field_size(value, format_spec)
        bounds.check_chars(self._limits, self._size)
        return super().format_field(value, format_spec)


_GROWING_STR_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "translate"})


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment configured as transformers configures it, with `limits` enforced."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, limits: Limits):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
        self.limits = limits
        self.filters.update(_bounded_filters(limits))
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.globals["dict"] = TemplateDict()
        self.globals["namespace"] = TemplateNamespace
        self.globals["lipsum"] = self._lipsum

    # -- operators and joins
    def call_binop(self, context, operator, left, right):
        bounds.check_binop(self.limits, operator, left, right)
        return self.binop_table[operator](left, right)

    def concat(self, parts):
        """Joins macro bodies, block sets and filter blocks (Jinja's `environment.concat`)."""
        if not isinstance(parts, list):
            parts = self._collect(parts)
        bounds.check_chars(self.limits, sum(map(len, parts)))
        return "".join(parts)

    def bounded_str_join(self, values):
        parts = [str(value) for value in values]
        bounds.check_chars(self.limits, sum(map(len, parts)))
        return "".join(parts)

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
        name = getattr(__obj, "__name__", None)
        if isinstance(owner, (str, bytes)) and name in _GROWING_STR_METHODS and __self.is_safe_callable(__obj):
            joined = bounds.check_str_method(__self.limits, name, owner, args, kwargs)
            if joined is not None:
                args = (joined,)
        elif isinstance(owner, int) and name == "to_bytes":
            bounds.check_to_bytes(__self.limits, args, kwargs)
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

    def _lipsum(self, n=5, html=True, min=20, max=100):  # noqa: A002 - Jinja's parameter names
        bounds.check_items(self.limits, int(n) * int(max))
        return generate_lorem_ipsum(n, html, min, max)


def _bounded_filters(limits: Limits) -> dict:
    """Growing filters as bounded wrappers. pass_context keeps Jinja from running them at compile time."""
    original = FILTERS

    @pass_context
    def center(context, value, width=80):
        bounds.check_chars(limits, max(len(str(value)), width if isinstance(width, int) else 0))
        return original["center"](value, width)

    @pass_context
    def indent(context, value, width=4, first=False, blank=False):
        text = str(value)
        per_line = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        bounds.check_chars(limits, len(text) + (len(text.splitlines()) + 1) * per_line)
        return original["indent"](value, width, first, blank)

    @pass_context
    def wordwrap(context, value, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True):
        text = str(value)
        separator = len(wrapstring) if isinstance(wrapstring, str) else 2
        lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
        bounds.check_chars(limits, len(text) + lines * separator)
        return original["wordwrap"](context.environment, value, width, break_long_words, wrapstring,
                                    break_on_hyphens)

    @pass_context
    def format(context, value, *args, **kwargs):  # noqa: A001 - the filter's name
        bounds.check_chars(limits, bounds.percent_format_size(str(value), kwargs or args))
        return original["format"](value, *args, **kwargs)

    @pass_context
    def join(context, value, d="", attribute=None):
        if attribute is not None:
            value = map(make_attrgetter(context.environment, attribute), value)
        separator = str(d)
        parts = bounds.check_str_method(limits, "join", separator, ([str(item) for item in value],), {})
        return separator.join(parts)

    @pass_context
    def replace(context, value, old, new, count=None):
        text = str(value)
        bounds.check_str_method(limits, "replace", text, (str(old), str(new), -1 if count is None else count), {})
        return original["replace"](context.eval_ctx, value, old, new, count)

    @pass_context
    def sum_(context, iterable, attribute=None, start=0):
        if attribute is not None:
            iterable = map(make_attrgetter(context.environment, attribute), iterable)
        if isinstance(start, str):
            raise TypeError("sum() can't sum strings [use ''.join(seq) instead]")
        total = start
        for item in iterable:
            bounds.check_binop(limits, "+", total, item)
            total = total + item
        return total

    @pass_context
    def batch(context, value, linecount, fill_with=None):
        bounds.check_items(limits, linecount if isinstance(linecount, int) else 0)
        return original["batch"](value, linecount, fill_with)

    @pass_context
    def tojson(context, value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return bounds.bounded_json(limits, value, ensure_ascii, indent, separators, sort_keys)

    return {"center": center, "indent": indent, "wordwrap": wordwrap, "format": format, "join": join,
            "replace": replace, "sum": sum_, "batch": batch, "tojson": tojson}
