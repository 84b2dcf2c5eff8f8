"""Bombs and escapes beyond the public lists (and beyond test_template_sandbox.py's), each judged as a worker
would live it: in a forked child under the worker's RLIMIT_AS, rendering in its main thread.

A case passes when the render ends within 1.5 s of its own CPU (a shared machine stretches only the wall
clock), resident memory grew by at most 512 MiB (sampled every
5 ms and from the child's ru_maxrss, so a spike between samples is seen), no CPU is burnt after the call
returned (the render really stopped), and neither the output nor the error message shows an address or
a Python internal. Bombs must end in a TemplateError; escapes may render, but must show nothing.
Covers tokworker.templates.bounds.
"""

from __future__ import annotations

import gc
import inspect
import multiprocessing
import multiprocessing.connection
import re
import resource
import time

import pytest

from tests.test_template_sandbox import PeakResident
from tokworker.templates import TemplateError, render_chat
from tokworker.worker.options import WorkerOptions

pytestmark = [pytest.mark.slow, pytest.mark.long]  # bombs, each in a forked child

MESSAGES = [{"role": "user", "content": "hi"}]
MAX_SECONDS, MAX_GROWTH, MAX_CPU_AFTER = 1.5, 512 * 2**20, 0.05
AT_ONCE, HUNG_S = 2, 30.0
ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
LEAKS = ("<class", "<module", "<function", "<built-in", "<bound", "<method", "object at", "mappingproxy",
         "builtins", "__globals__", "jinja2", "tokworker", "<generator", "<cell", "<code", "iterator object")

# a list nested by doubling 40 times (2**40 leaves, 40 objects), twice, with distinct but equal leaves
DOUBLED = ("{% set ns = namespace(a='xy', b='x' ~ 'y', t=('xy',)) %}{% for i in range(40) %}"
           "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% set ns.t = (ns.t, ns.t) %}{% endfor %}")
SHARED = "{% set s = 'x' * 10**7 %}{% set l = [s] * 10**6 %}"   # 10**13 characters reachable
# 20,000 distinct characters, one of which fills a 16M-character string: strip scans them per character
DISTINCT = "{% set ns = namespace(s='') %}{% for i in range(19968, 39968) %}{% set ns.s = ns.s ~ '%c' % i %}{% endfor %}"

BOMBS = {
    # str() and repr() of containers, wherever a template can ask for them
    "repr_output": SHARED + "{{ l }}",
    "repr_string_filter": SHARED + "{{ l|string|length }}",
    "repr_tilde": SHARED + "{{ (l ~ '')|length }}",
    "repr_percent_s": SHARED + "{{ '%s' % (l,) }}",
    "repr_percent_r_of_str": "{{ '%r' % ('\\x00' * 10**7,) }}",
    "repr_percent_mapping": SHARED + "{{ '%(a)s' % {'a': l} }}",
    "repr_format": SHARED + "{{ '{}'.format(l) }}",
    "repr_format_r": SHARED + "{{ '{!r}'.format(l[:1000]) }}",
    "repr_format_a": "{{ '{!a}'.format(['\U0001d11e' * 10**6] * 10) }}",
    "repr_format_map": SHARED + "{{ '{a}'.format_map({'a': l}) }}",
    "repr_format_filter": SHARED + "{{ '%s'|format(l) }}",
    "repr_join_nested": SHARED + "{{ [l]|join }}",
    "repr_pprint": SHARED + "{{ l[:1000]|pprint }}",
    "repr_escape": SHARED + "{{ l|e }}",
    "repr_xmlattr": SHARED + "{{ {'a': l}|xmlattr }}",
    "repr_urlencode": SHARED + "{{ {'a': l}|urlencode }}",
    "repr_namespace": SHARED + "{{ namespace(a=l) }}",
    "repr_fromkeys": "{{ dict.fromkeys(range(100000), 'x' * 10**6) }}",
    "repr_items_view": "{{ dict.fromkeys(range(100000), 'x' * 10**6).items() }}",
    "repr_doubled_list": DOUBLED + "{{ ns.a }}",
    "repr_doubled_upper": DOUBLED + "{{ ns.a|upper }}",
    "tojson_doubled": DOUBLED + "{{ ns.a|tojson }}",
    "tojson_control_chars": "{{ ('\\x01' * 10**7)|tojson|length }}",
    "tojson_ensure_ascii_astral": "{{ ('\U0001d11e' * 10**7)|tojson(ensure_ascii=true)|length }}",
    # integers: capped where they are made, and arithmetic priced by operand size
    "int_hex_filter": "{{ ('f' * 10**6)|int(base=16) % 7 }}",
    "int_binary_filter": "{{ ('1' * 10**7)|int(base=2) // 3 }}",
    "int_prefixed_base0": "{{ ('0x' ~ 'f' * 10**6)|int(base=0) % 7 }}",
    "int_underscores": "{{ ('f_' * 10**6 ~ 'f')|int(base=16) % 7 }}",
    "int_hex_literal": "{{ 0x" + "f" * 200_000 + " % 7 }}",
    "int_from_bytes": "{{ (1).from_bytes(('x' * 10**6).encode(), 'big') % 7 }}",
    "int_squaring_loop": "{% set ns = namespace(n=2 ** 60000) %}{% for i in range(50) %}"
                         "{% set ns.n = ns.n * ns.n + 1 %}{% endfor %}",
    "int_power_of_big": "{{ (2 ** 65000) ** 2 }}",
    "int_round_ceil": "{{ 1.5|round(10**8, 'ceil') }}",
    "int_round_negative": "{{ 5|round(-10**8) }}",
    "int_sum_products": "{{ [2 ** 40000, 2 ** 40000]|sum * 2 ** 40000 }}",
    # filters and methods that multiply their input
    "list_astral": "{{ ('\U0001d11e' * 10**7)|list|length }}",
    "sort_astral": "{{ ('\U0001d11e' * 10**7)|sort|length }}",
    "sort_shared_long_strings": SHARED + "{{ l|sort(case_sensitive=true)|length }}",
    "unique_astral": "{{ ('\U0001d11e' * 10**7)|unique|list|length }}",
    "batch_astral": "{{ ('\U0001d11e' * 10**7)|batch(3)|list|length }}",
    "slice_count": "{{ [1]|slice(10**9)|list|length }}",
    "join_astral": "{{ ('\U0001d11e' * 10**7)|join(',')|length }}",
    "join_method_astral": "{{ ','.join('\U0001d11e' * 10**7)|length }}",
    "fromkeys_astral": "{{ dict.fromkeys('\U0001d11e' * 10**7)|length }}",
    "fromkeys_on_instance": "{{ {}.fromkeys('\U0001d11e' * 10**7)|length }}",
    "maketrans_astral": "{{ ''.maketrans('\U0001d11e' * 10**7, '\U0001d11f' * 10**7)|length }}",
    "hex_doubling": "{{ ('x' * 10**7).encode().hex()|length }}",
    "encode_unicode_escape": "{{ ('\\x00' * 10**7).encode('unicode_escape')|length }}",
    "encode_utf32": "{{ ('x' * 10**7).encode('utf-32')|length }}",
    "encode_namereplace": "{{ ('\\u00e9' * 10**6).encode('ascii', 'namereplace')|length }}",
    "encode_xmlcharref": "{{ ('\U0001d11e' * 10**7).encode('ascii', 'xmlcharrefreplace')|length }}",
    "encode_punycode": "{{ ('\\u00e9\\u4e00' * 50000).encode('punycode')|length }}",
    "decode_backslashreplace": "{{ ('\\u00ff' * 10**7).encode('latin-1').decode('ascii', 'backslashreplace')|length }}",
    "forceescape": "{{ ('<' * 10**7)|forceescape|length }}",
    "markup_plus_escapes": "{{ (('x'|safe) + '<' * 10**7)|length }}",
    "markup_percent_escapes": "{{ (('%s'|safe) % ('<' * 10**7,))|length }}",
    "markup_replace_escapes": "{{ (('x' * 10**6)|safe).replace('x', '<' * 10)|length }}",
    "markup_join_escapes": "{{ ('x'|safe).join(['<' * 10**6] * 10)|length }}",
    "escape_quotes": "{{ ('\"' * 10**7)|e|length }}",
    "xmlattr_value": "{{ {'a': '<' * 10**7}|xmlattr|length }}",
    "urlencode_astral": "{{ ('\U0001d11e' * 10**7)|urlencode|length }}",
    "upper_ligature_filter": "{{ ('\\ufb03' * 10**7)|upper|length }}",
    "upper_ligature_method": "{{ ('\\ufb03' * 10**7).upper()|length }}",
    "casefold_sharp_s": "{{ ('\\u00df' * 10**7).casefold()|length }}",
    "split_astral": "{{ ('\U0001d11e,' * 5 * 10**6).split(',')|length }}",
    "split_whitespace_astral": "{{ ('\U0001d11e ' * 5 * 10**6).split()|length }}",
    "rsplit_astral": "{{ ('\U0001d11e,' * 5 * 10**6).rsplit(',')|length }}",
    "splitlines_astral": "{{ ('\U0001d11e\\n' * 5 * 10**6).splitlines()|length }}",
    "indent_string_width": "{{ ('a\\n' * 100000)|indent('x' * 1000) }}",
    "replace_empty_old": "{{ ('a' * 10**6)|replace('', 'x' * 100) }}",
    "translate_list_table": "{{ ('a' * 10**6).translate(['x' * 1000] * 256) }}",
    "bytes_zfill": "{{ 'a'.encode().zfill(10**9)|length }}",
    "bytes_expandtabs": "{{ ('\\t' * 1000).encode().expandtabs(10**7)|length }}",
    "bytes_percent_width": "{{ ('%1000000000s'.encode() % ('a'.encode(),))|length }}",
    "urlize_many_links": "{{ ('a.co ' * 3 * 10**6)|urlize|length }}",
    "urlize_unicode_spaces": "{{ ('𝄞\u3000' * 5 * 10**6)|urlize|length }}",
    "wordwrap_astral_words": "{{ ('𝄞 ' * 5 * 10**6)|wordwrap(10**6)|length }}",
    "title_astral_words": "{{ ('𝄞-' * 5 * 10**6)|title|length }}",
    "striptags_astral_words": "{{ ('𝄞 ' * 5 * 10**6)|striptags|length }}",
    "indent_astral_lines": "{{ ('𝄞\n' * 5 * 10**6)|indent(0)|length }}",
    # walks in C over shared structures: comparisons, membership, hashing, sorting
    "compare_doubled": DOUBLED + "{{ ns.a == ns.b }}",
    "compare_doubled_chain": DOUBLED + "{{ 1 < 2 < 3 and ns.a != ns.b }}",
    "in_doubled": DOUBLED + "{{ ns.b in [ns.a] }}",
    "test_eq_doubled": DOUBLED + "{{ ns.a is eq(ns.b) }}",
    "select_eq_doubled": DOUBLED + "{{ [ns.a]|select('eq', ns.b)|list|length }}",
    "loop_changed_doubled": DOUBLED + "{% for x in [ns.a, ns.b] %}{{ loop.changed(x) }}{% endfor %}",
    "count_shared_long": SHARED + "{{ l.count(s ~ '') }}",
    "index_shared_long": SHARED + "{{ l.index(s ~ '') }}",
    "in_shared_long": SHARED + "{{ (s ~ '') in l }}",
    "startswith_shared_prefixes": SHARED + "{{ s.startswith(((s[1:] ~ 'y'),) * 10**6) }}",
    "endswith_shared_prefixes": SHARED + "{{ s.endswith(((s[1:] ~ 'y'),) * 10**6) }}",
    "hash_doubled_dict_key": DOUBLED + "{{ {ns.t: 1}|length }}",
    "hash_doubled_in_dict": DOUBLED + "{{ ns.t in {} }}",
    "hash_doubled_get": DOUBLED + "{{ {}.get(ns.t) }}",
    "hash_doubled_subscript": DOUBLED + "{{ {}[ns.t] }}",
    "hash_doubled_namespace_pairs": DOUBLED + "{{ namespace([(ns.t, 1)]) }}",
    "hash_doubled_unique": DOUBLED + "{{ [ns.t]|unique|list|length }}",
    "hash_doubled_fromkeys": DOUBLED + "{{ dict.fromkeys([ns.t])|length }}",
    "hash_doubled_dict_pairs": DOUBLED + "{{ dict([(ns.t, 1)])|length }}",
    "sort_doubled": DOUBLED + "{{ [ns.a, ns.b]|sort|length }}",
    "max_doubled": DOUBLED + "{{ [ns.a, ns.b]|max|length }}",
    # issue 22's round: strip's C scan of its `chars`, keys that all hash alike, a tuple too deep to hash,
    # strftime's directives
    "strip_distinct_chars": DISTINCT + "{{ ('\u9c3f' * 16000000).strip(ns.s)|length }}",
    "trim_distinct_chars": DISTINCT + "{{ ('\u9c3f' * 16000000)|trim(ns.s)|length }}",
    "rstrip_bytes_chars": "{{ ('a' * 16000000).encode().rstrip(('b' * 10**6 ~ 'a').encode())|length }}",
    "fromkeys_colliding": "{{ dict.fromkeys(range(0, 100000 * 2305843009213693951, 2305843009213693951))|length }}",
    "fromkeys_colliding_on_instance": "{{ {}.fromkeys(range(0, 100000 * 2305843009213693951, "
                                      "2305843009213693951))|length }}",
    "dict_pairs_colliding": "{{ dict(range(0, 100000 * 2305843009213693951, 2305843009213693951)|batch(2))|length }}",
    "dict_literal_colliding": "{% set m = 2305843009213693951 %}{{ {"
                              + ",".join(f"{i}*m:0" for i in range(24000)) + "}|length }}",
    "hash_deep_tuple": "{% set ns = namespace(t=()) %}{% for i in range(5000) %}{% set ns.t = (ns.t,) %}"
                       "{% endfor %}{{ {ns.t: 1}|length }}",   # refused by its depth, as a 240,000-deep one
    "strftime_directives": "{{ strftime_now('%c' * 8000000)|length }}",
}
# bounded rather than refused: each may end either way, but within the same budgets
BOUNDED = {"wordcount_astral": "{{ ('\U0001d11e ' * 5 * 10**6)|wordcount }}",
           "float_of_many_digits": "{{ ('9' * 10**7)|float }}",
           "lipsum_long_words": "{{ lipsum(1, min=10**6, max=10**6)|length }}",
           "find_long_needle": "{{ ('a' * 10**7).count('a' * 99 ~ 'b') }}",
           "int_mod_of_capped": "{{ (2 ** 65000 - 1) % (2 ** 32000 + 7) }}",
           "strip_repeated_chars": "{{ ('a' * 16000000).strip('b' * 1000 ~ 'a')|length }}"}

ESCAPES = [
    "{{ dict.fromkeys }}", "{{ {}.fromkeys }}", "{{ cycler(1, 2).next }}", "{{ cycler(1, 2) }}", "{{ cycler }}",
    "{{ joiner() }}", "{{ joiner }}", "{{ namespace }}", "{{ namespace(f=cycler) }}", "{{ lipsum }}",
    "{{ range }}", "{{ raise_exception }}", "{{ strftime_now }}", "{{ ''.upper }}", "{{ ''.format }}",
    "{{ messages.count }}", "{{ ().count }}", "{{ (1).to_bytes }}", "{{ (1).from_bytes }}", "{{ self }}",
    "{% for x in [1] %}{{ loop }}{{ loop.cycle }}{{ loop.changed }}{% endfor %}",
    "{% macro m() %}{% endmacro %}{{ m }}", "{% macro m() %}{{ caller }}{% endmacro %}{% call m() %}{% endcall %}",
    "{{ [1, 2]|map('string') }}", "{{ [1, 2]|select }}", "{{ [1, 2]|reverse }}", "{{ {'a': 1}|items }}",
    "{{ [1, 2]|unique }}", "{{ [1, 2]|batch(1) }}", "{{ [1, 2]|slice(1) }}",
    "{{ [cycler, joiner, namespace, lipsum]|string }}", "{{ [cycler] ~ joiner }}", "{{ [cycler]|join }}",
    "{{ '%s %r' % (cycler, joiner) }}", "{{ '%(a)s' % {'a': cycler} }}", "{{ '%s' % {'a': cycler} }}",
    "{{ '{} {!r} {!s} {!a}'.format(lipsum, range, cycler, joiner) }}", "{{ '{a}'.format_map({'a': joiner}) }}",
    "{{ '%s'|format(cycler) }}", "{{ [dict.fromkeys]|tojson }}", "{{ [cycler]|pprint }}",
    "{{ {'a': cycler}|xmlattr }}", "{{ {'a': cycler}|urlencode }}", "{{ cycler|e }}", "{{ cycler|forceescape }}",
    "{{ cycler|safe }}", "{{ cycler|trim }}", "{{ cycler|upper }}", "{{ cycler|title }}", "{{ cycler|wordcount }}",
    "{{ cycler|center(300) }}", "{{ cycler|indent }}", "{{ cycler|replace('a', 'b') }}", "{{ cycler|truncate(900) }}",
    "{{ cycler|striptags }}", "{{ cycler|urlize }}", "{{ cycler|list }}", "{{ cycler|attr('next') }}",
    "{{ x|default(cycler) }}", "{{ {'k': [messages.count, cycler(1).reset]} }}",
    "{{ (messages|groupby('role'))[0] }}", "{{ messages[0].items() }}", "{{ dict.fromkeys('ab').keys() }}",
]


def _judge(template, connection, memory_limit_mb):
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit_mb << 20, resource.getrlimit(resource.RLIMIT_AS)[1]))
    gc.freeze()       # as a worker freezes what it loaded (the test session's objects are not the render's)
    with PeakResident() as resident:
        started, started_cpu = time.monotonic(), time.thread_time()
        try:
            output, outcome = render_chat(template, MESSAGES), "rendered"
        except TemplateError as error:
            output, outcome = str(error), type(error).__name__
        except BaseException as error:  # noqa: BLE001 - anything untyped is a failure
            output, outcome = str(error), f"UNTYPED {type(error).__name__}"
        # the render's own CPU is the budget: other processes on a shared machine stretch the wall clock, not it
        elapsed, wall = time.thread_time() - started_cpu, time.monotonic() - started
    cpu = time.process_time()
    time.sleep(0.1)                       # a render still running would burn CPU here
    cpu_after = time.process_time() - cpu
    peak_bytes = max(resident.peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    connection.send((outcome, elapsed, wall, max(peak_bytes - resident.baseline, 0), cpu_after, output[:2000]))


def _run_all(cases: dict) -> dict:
    """Each case in a child of its own, two at a time (each is judged by its own thread's CPU clock and its
    own memory, so a neighbour costs only wall clock)."""
    render_chat("{{ 1 }}", MESSAGES)      # import and warm everything before forking
    context = multiprocessing.get_context("fork")
    memory_limit_mb = inspect.signature(WorkerOptions).parameters["memory_limit_mb"].default
    results, waiting, running = {}, list(cases.items()), {}
    while waiting or running:
        while waiting and len(running) < AT_ONCE:
            name, template = waiting.pop(0)
            receiver, sender = context.Pipe(duplex=False)
            child = context.Process(target=_judge, args=(template, sender, memory_limit_mb))
            child.start()
            running[receiver] = (name, child, time.monotonic() + HUNG_S)
        for receiver in multiprocessing.connection.wait(list(running), timeout=0.5):
            name, child, _ = running.pop(receiver)
            results[name] = receiver.recv()
            _reap(child)
        for receiver, (name, child, deadline) in list(running.items()):
            if time.monotonic() > deadline:
                del running[receiver]
                results[name] = ("HUNG", HUNG_S, HUNG_S, 0, 0.0, "")
                _reap(child)
    for name, (outcome, elapsed, wall, growth, cpu_after, _) in sorted(results.items()):
        print(f"{name:32s} {outcome:22s} {elapsed * 1000:7.0f} ms cpu {wall * 1000:7.0f} ms wall "
              f"{growth / 2**20:7.1f} MiB {cpu_after * 1000:4.0f} ms")
    return results


def _reap(child) -> None:
    child.join(5)
    if child.is_alive():
        child.kill()
        child.join()


@pytest.fixture(scope="module")
def results():
    cases = dict(BOMBS, **BOUNDED)
    cases.update({f"escape_{index:02d}": template for index, template in enumerate(ESCAPES)})
    return _run_all(cases)


def _check_budgets(name, result):
    outcome, elapsed, wall, growth, cpu_after, text = result
    assert not outcome.startswith(("UNTYPED", "HUNG")), (name, outcome, text[:300])
    assert elapsed <= MAX_SECONDS, f"{name} took {elapsed:.2f} s of CPU ({wall:.2f} s wall)"
    assert growth <= MAX_GROWTH, f"{name} grew resident memory by {growth / 2**20:.0f} MiB"
    assert cpu_after <= MAX_CPU_AFTER, f"{name} burnt {cpu_after:.2f} s of CPU after returning"
    assert not ADDRESS.search(text), (name, text[:300])
    assert not any(leak in text for leak in LEAKS), (name, text[:300])


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bomb_is_refused_within_budget(name, results):
    _check_budgets(name, results[name])
    assert results[name][0] in {"TemplateLimitError", "TemplateTimeoutError", "TemplateRenderError",
                                "TemplateSecurityError"}, results[name]


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_bounded_case_ends_within_budget(name, results):
    _check_budgets(name, results[name])


@pytest.mark.parametrize("index", range(len(ESCAPES)))
def test_escape_shows_nothing(index, results):
    _check_budgets(ESCAPES[index], results[f"escape_{index:02d}"])


def test_counts():
    """The README quotes these counts."""
    assert len(BOMBS) + len(BOUNDED) >= 50 and len(ESCAPES) >= 50


def test_plain_data_reprs_are_pythons():
    """What a real template prints from plain data (Llama 3 str()s a list of parts) is Python's repr."""
    parts = [{"type": "text", "text": "it's \"quoted\" \\ \n\U0010fffd é"}, {"n": [1, 2.5, None, True, (1,)]}]
    messages = [{"role": "user", "content": parts}]
    assert render_chat("{{ messages[0].content }}|{{ messages[0].content|string }}|{{ messages[0].content ~ '' }}",
                       messages) == "|".join([str(parts)] * 3)
    assert render_chat("{{ '%s|%r' % (messages[0].content, 'a') }}", messages) == f"{parts}|'a'"
    assert render_chat("{{ '{}|{!r}'.format(messages[0].content, 'a') }}", messages) == f"{parts}|'a'"
