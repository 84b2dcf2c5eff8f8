"""Jinja's filters and tests, each priced before it allocates or walks.

Every filter of jinja2's DEFAULT_FILTERS is either safe as it is (its result is no larger than its input
and it walks nothing in C: length, first, trim, map, select, ...) or replaced here by a wrapper that:
- turns a non-string input into text through reprs.shown_str (priced, no addresses) where jinja would call
  str() on it;
- prices the result from the input's sizes (escape grows 5x, urlencode 12x, upper 3x, ...) or materializes
  at most max_items items;
- prices C walks (sorting, hashing, comparing) by weighing the values first.
Wrappers are marked pass_context so Jinja never runs them at compile time on constants.
"""

from __future__ import annotations

import pprint as _pprint
import re
from collections.abc import Mapping
from functools import partial

from jinja2 import pass_context
from jinja2.filters import FILTERS, make_attrgetter
from jinja2.runtime import Undefined
from jinja2.tests import TESTS
from markupsafe import Markup, escape as _escape

from . import bounds, reprs
from .bounds import Limits
from .owned import joined, stripped

_WORD = re.compile(r"\w+")                   # jinja's own wordcount pattern
_NON_WORD = re.compile(r"\W")
_WORD_PIECE = 1 << 16
_MAX_ROUND_DIGITS = 1000                      # round(x, -10**8) computes 10**(10**8) in C


def bounded_filters(limits: Limits, percent) -> dict:
    """The priced filters. `percent(text, values)` is the environment's priced `%`."""
    original = FILTERS

    def text_of(value) -> str:
        return value if isinstance(value, str) else reprs.shown_str(value, limits)

    def escaped_size(text: str) -> int:
        return len(text) + 4 * sum(text.count(mark) for mark in "&<>'\"")

    def textual(name, grows=1, splits=None):
        """A filter that calls str() on its input: shown text in, case mappings priced, and words counted
        for those that split the text (`splits`: the separators they split at besides whitespace)."""
        function = original[name]

        @pass_context
        def wrapper(context, value, *args, **kwargs):
            text = text_of(value)
            if grows > 1 and not text.isascii():
                bounds.check_chars(limits, grows * len(text))
            if splits is not None:
                bounds.check_words(limits, text, splits)
            if name == "truncate":     # the one of these that takes the environment
                return function(context.environment, text, *args, **kwargs)
            return function(text, *args, **kwargs)

        return wrapper

    def weighed(name):
        """A filter that sorts, hashes or compares its items in C: items bounded, then weighed."""
        function = original[name]

        @pass_context
        def wrapper(context, value, *args, **kwargs):
            items = value if isinstance(value, Mapping) else bounds.bounded_list(limits, value)
            reprs.weigh(items, limits, f"the items of |{name}")
            return function(context.environment, items, *args, **kwargs) if name != "dictsort" \
                else function(items, *args, **kwargs)

        return wrapper

    @pass_context
    def center(context, value, width=80):
        text = text_of(value)
        bounds.check_chars(limits, max(len(text), width if isinstance(width, int) else 0))
        return original["center"](text, width)

    @pass_context
    def indent(context, value, width=4, first=False, blank=False):
        text = text_of(value)
        per_line = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        lines = bounds.line_count(text, limits.max_items)
        bounds.check_items(limits, lines)
        bounds.check_chars(limits, len(text) + (lines + 1) * per_line)
        return original["indent"](text, width, first, blank)

    @pass_context
    def wordwrap(context, value, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True):
        text = text_of(value)
        separator = len(wrapstring) if isinstance(wrapstring, str) else 2
        lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
        bounds.check_chars(limits, len(text) + lines * separator)
        bounds.check_words(limits, text)
        return original["wordwrap"](context.environment, text, width, break_long_words, wrapstring,
                                    break_on_hyphens)

    @pass_context
    def format(context, value, *args, **kwargs):  # noqa: A001 - the filter's name
        if args and kwargs:
            raise TypeError("can't handle positional and keyword arguments at the same time")
        return percent(text_of(value), kwargs or args)

    @pass_context
    def join(context, value, d="", attribute=None):
        if attribute is not None:
            value = map(make_attrgetter(context.environment, attribute), value)
        separator = text_of(d)
        parts = [text_of(item) for item in bounds.bounded_list(limits, value)]
        bounds.check_str_method(limits, "join", separator, (parts,), {})
        return joined(parts, separator)

    @pass_context
    def replace(context, value, old, new, count=None):
        text, old, new = text_of(value), text_of(old), text_of(new)
        bounds.check_str_method(limits, "replace", text, (old, new, -1 if count is None else count), {})
        return original["replace"](context.eval_ctx, text, old, new, count)

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
        return original["batch"](bounds.bounded_list(limits, value), linecount, fill_with)

    @pass_context
    def slice_(context, value, slices, fill_with=None):
        bounds.check_items(limits, slices if isinstance(slices, int) else 0)
        return original["slice"](bounds.bounded_list(limits, value), slices, fill_with)

    @pass_context
    def tojson(context, value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        reprs.weigh(value, limits, "a JSON dump", partial(bounds.json_string_size, ensure_ascii=ensure_ascii))
        return bounds.bounded_json(limits, value, ensure_ascii, indent, separators, sort_keys)

    @pass_context
    def string(context, value):
        return text_of(value)

    @pass_context
    def pprint(context, value):
        reprs.weigh(value, limits)
        text = _pprint.pformat(_plain_copy(value, limits))
        bounds.check_chars(limits, len(text))
        return text

    @pass_context
    def escape(context, value):
        if hasattr(value, "__html__"):
            return Markup(value.__html__())
        text = text_of(value)
        bounds.check_chars(limits, escaped_size(text))
        return _escape(text)

    @pass_context
    def forceescape(context, value):
        text = value.__html__() if hasattr(value, "__html__") else text_of(value)
        bounds.check_chars(limits, escaped_size(str(text)))
        return _escape(str(text))

    @pass_context
    def safe(context, value):
        return Markup(text_of(value))

    @pass_context
    def xmlattr(context, value, autospace=True):
        shown = {key: (item if item is None or isinstance(item, Undefined) else text_of(item))
                 for key, item in value.items()}
        bounds.check_chars(limits, sum(len(text_of(key)) + 4 + (escaped_size(item) if isinstance(item, str) else 0)
                                       for key, item in shown.items()))
        return original["xmlattr"](context.eval_ctx, shown, autospace)

    @pass_context
    def urlencode(context, value):
        if isinstance(value, (str, bytes)):
            pairs = None
            bounds.check_chars(limits, _quoted_size(value))
        else:
            items = value.items() if isinstance(value, Mapping) else bounds.bounded_list(limits, value)
            pairs = [(k if isinstance(k, (str, bytes)) else text_of(k), v if isinstance(v, (str, bytes)) else text_of(v))
                     for k, v in items]
            bounds.check_chars(limits, sum(_quoted_size(k) + _quoted_size(v) + 2 for k, v in pairs))
        return original["urlencode"](value if pairs is None else pairs)

    @pass_context
    def urlize(context, value, trim_url_limit=None, nofollow=False, target=None, rel=None, extra_schemes=None):
        text = text_of(value)
        extra = 64 + sum(len(a) for a in (target, rel) if isinstance(a, str))
        pieces = sum(text.count(mark) for mark in " \n\t\r") + 1
        bounds.check_words(limits, text)
        bounds.check_chars(limits, 2 * len(text) + pieces * extra)
        return original["urlize"](context.eval_ctx, text, trim_url_limit, nofollow, target, rel, extra_schemes)

    @pass_context
    def trim(context, value, chars=None):
        text = text_of(value)
        return stripped(text, "strip", bounds.strip_chars(limits, text, chars))

    @pass_context
    def wordcount(context, value):
        return _count_words(text_of(value))

    @pass_context
    def list_(context, value):
        return bounds.bounded_list(limits, value)

    @pass_context
    def int_(context, value, default=0, base=10):
        if isinstance(value, (str, bytes)):
            bounds.check_int_text(limits, value)
        return bounds.check_int(limits, original["int"](value, default, base))

    @pass_context
    def round_(context, value, precision=0, method="common"):
        if not isinstance(precision, int) or abs(precision) > _MAX_ROUND_DIGITS:
            bounds.refuse("a rounding precision", precision if isinstance(precision, int) else 0, _MAX_ROUND_DIGITS)
        return original["round"](value, precision, method)

    filters = {"center": center, "indent": indent, "wordwrap": wordwrap, "format": format, "join": join,
               "replace": replace, "sum": sum_, "batch": batch, "slice": slice_, "tojson": tojson,
               "string": string, "pprint": pprint, "escape": escape, "e": escape, "forceescape": forceescape,
               "safe": safe, "xmlattr": xmlattr, "urlencode": urlencode, "urlize": urlize, "trim": trim,
               "wordcount": wordcount,
               "list": list_, "int": int_, "round": round_}
    for name in ("upper", "lower", "capitalize"):
        filters[name] = textual(name, grows=3)
    filters["title"] = textual("title", grows=3, splits="-({[<")
    filters["striptags"] = textual("striptags", splits="<")
    filters["truncate"] = textual("truncate")
    for name in ("sort", "unique", "dictsort", "groupby", "max", "min"):
        filters[name] = weighed(name)
    return filters


def bounded_tests(compare) -> dict:
    """The comparison tests (`is eq`, `is in`, ...) through the environment's priced comparison."""
    names = {"==": "==", "eq": "==", "equalto": "==", "!=": "!=", "ne": "!=", "<": "<", "lt": "<",
             "lessthan": "<", "<=": "<=", "le": "<=", ">": ">", "gt": ">", "greaterthan": ">", ">=": ">=",
             "ge": ">="}
    tests = {name: (lambda operator: lambda value, other: compare(value, operator, other))(operator)
             for name, operator in names.items()}
    tests["in"] = lambda value, seq: compare(value, "in", seq)
    assert set(tests) <= set(TESTS)
    return tests


def _count_words(text: str) -> int:
    """len(_WORD.findall(text)) without the list, in pieces cut between words, so that the watchdog can
    stop a long count between two of them (one C scan of 16 M characters takes about a second)."""
    count, at, end_of_text = 0, 0, len(text)
    while at < end_of_text:
        cut = _NON_WORD.search(text, min(at + _WORD_PIECE, end_of_text))
        end = cut.start() if cut else end_of_text
        count += sum(1 for _ in _WORD.finditer(text, at, end))
        at = end + 1
    return count


def _quoted_size(value) -> int:
    """An upper bound on the length of url_quote(value): 3 characters per UTF-8 byte."""
    if isinstance(value, bytes):
        return 3 * len(value)
    return 3 * len(value) if value.isascii() else 12 * len(value)


def _plain_copy(value, limits: Limits):
    """value with every non-plain object replaced by a stand-in that pprint shows through shown_repr."""
    if isinstance(value, (str, bytes, bool, int, float)) or value is None:
        return value
    if isinstance(value, dict):
        return {_plain_copy(k, limits): _plain_copy(v, limits) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(item, limits) for item in value]
    if type(value) is tuple:
        return tuple(_plain_copy(item, limits) for item in value)
    return reprs.Shown(value, limits)

