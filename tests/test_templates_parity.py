"""render_chat against transformers' own apply_chat_template on the 36 real templates in ../shared.

The oracle is a PreTrainedTokenizerFast built in-test around a one-word tokenizer (no model is loaded), so
transformers' whole path runs: normalization, tool schemas, continue_final_message, its Jinja environment.
Its clock is frozen to the same `now` we pass. Outputs must be identical; where it raises, we raise
TemplateError.
Covers tokworker.templates.prepare and tokworker.templates.tool_schema.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.chat_corpus import NOW, TOOLS, scenarios, transformers_clock
from tests.realdata import chat_templates
from tokworker.templates import TemplateError, render_chat

TEMPLATES = chat_templates()

pytestmark = pytest.mark.skipif(not TEMPLATES, reason="../shared/fixtures/chat_templates is not present")


@pytest.fixture(scope="module")
def oracle():
    """transformers' apply_chat_template(tokenize=False) with a frozen strftime_now clock."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tokenizers = {}

    def render(entry, messages, **kwargs):
        key = (entry.get("bos_token"), entry.get("eos_token"))
        if key not in tokenizers:
            special = {name: value for name, value in zip(("bos_token", "eos_token"), key) if value is not None}
            word_level = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
            tokenizers[key] = PreTrainedTokenizerFast(tokenizer_object=word_level, **special)
        kwargs.setdefault("add_generation_prompt", True)
        return tokenizers[key].apply_chat_template(messages, chat_template=entry["text"], tokenize=False, **kwargs)

    with transformers_clock():
        yield render


def _template_kwargs(entry, kwargs):
    kwargs = dict(kwargs, **(entry.get("extra_template_kwargs") or {}))
    if entry.get("tools_json_kwarg"):
        kwargs[entry["tools_json_kwarg"]] = json.dumps(kwargs.get("tools") or TOOLS)
    return kwargs


def _ours(entry, messages, kwargs):
    special = {name: entry[name] for name in ("bos_token", "eos_token") if entry.get(name) is not None}
    return render_chat(entry["text"], messages, now=NOW, **special, **kwargs)


@pytest.mark.parametrize("file", sorted(TEMPLATES))
def test_template_matches_transformers(file, oracle):
    entry = TEMPLATES[file]
    rendered = raised = 0
    for name, messages, kwargs in scenarios():
        kwargs = _template_kwargs(entry, kwargs)
        try:
            expected = oracle(entry, copy.deepcopy(messages), **copy.deepcopy(kwargs))
        except Exception:  # transformers refused this input: so must we
            with pytest.raises(TemplateError):
                _ours(entry, messages, kwargs)
            raised += 1
            continue
        assert _ours(entry, messages, kwargs) == expected, f"{file} / {name}"
        rendered += 1
    assert rendered >= 3, f"{file}: only {rendered} scenarios rendered ({raised} raised in transformers too)"


def test_corpus_renders_on_most_templates(oracle):
    """The conversation set is not vacuous: most (template, scenario) pairs render in transformers."""
    total = ok = 0
    for entry in TEMPLATES.values():
        for name, messages, kwargs in scenarios():
            total += 1
            try:
                oracle(entry, messages, **_template_kwargs(entry, kwargs))
                ok += 1
            except Exception:
                pass
    assert ok / total > 0.6, (ok, total)


def read_file(path: str, lines: list[int] | None = None, mode: str = "text") -> str:
    """
    Read a file of the repository.

    Args:
        path: Where the file is,
            relative to the root.
        lines: First and last line
        mode: How to read it (choices: ["text", "bytes"])

    Returns:
        The file's text.
    """
    return path


TOOL_TEMPLATES = ["Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja",
                  "vllm-examples-tool_chat_template_hermes.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja"]


@pytest.mark.parametrize("file", TOOL_TEMPLATES)
def test_python_functions_as_tools(file, oracle):
    entry = TEMPLATES[file]
    messages = [{"role": "user", "content": "Open README.md"}]
    expected = oracle(entry, copy.deepcopy(messages), tools=[read_file])
    assert _ours(entry, messages, {"tools": [read_file]}) == expected
    assert "Where the file is, relative to the root." in expected


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(system=TEXT, user=TEXT, answer=TEXT, thinking=st.booleans(),
       file=st.sampled_from(["Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja",
                             "google-gemma-2-2b-it.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
                             "moonshotai-Kimi-K2.jinja", "openai-gpt-oss-120b.jinja"]))
def test_arbitrary_text_renders_identically(oracle, system, user, answer, thinking, file):
    entry = TEMPLATES[file]
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer},
                {"role": "user", "content": system}]
    if file != "google-gemma-2-2b-it.jinja":
        messages.insert(0, {"role": "system", "content": system})
    kwargs = {"enable_thinking": thinking, "thinking": thinking}
    try:
        expected = oracle(entry, copy.deepcopy(messages), **kwargs)
    except Exception:
        with pytest.raises(TemplateError):
            _ours(entry, messages, kwargs)
        return
    assert _ours(entry, messages, kwargs) == expected


HELPERS = [
    "{{ messages|tojson }}|{{ messages|tojson(indent=2) }}|{{ {'b': 1, 'a': 'é'}|tojson(sort_keys=true) }}",
    "{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }}{{ 'é'|tojson(ensure_ascii=true) }}{{ none|tojson }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %A %B') }}",
    "{% if messages|length > 1 %}{{ raise_exception('too many: ' ~ messages|length) }}{% endif %}ok",
    "{% for m in messages %}{% generation %}{% set inner = 1 %}[{{ m.content }}]{% endgeneration %}"
    "{{ inner is defined }}{% endfor %}",
    "{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ dict(x=1) }}{{ dict.fromkeys(['a'], 0) }}",
    "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.role }}{% break %}{% endfor %}",
    "  {% for m in messages %}\n    {{ m.role }}\n  {% endfor %}\n{{ messages[0].missing }}|{{ none }}|{{ tools }}",
    "line one\r\n{% if true %}\r\n  two\r\n{% endif %}\r\nthree\r\n",
    "{{ '%s-%05d' % ('a', 7) }}{{ '{:>6}|{!r}'.format('x', 'y') }}{{ 'a,b'.split(',')|join('+') }}"
    "{{ ('x' * 3) ~ ('y' + 'z') }}{{ 2 ** 10 }}{{ 7 % 3 }}{{ [1] * 3 }}{{ 'ab'|center(6) }}",
    "{{ ' a\n b'|indent(2, true) }}{{ [1, 2, 3]|batch(2, 0)|list }}{{ [[1], [2]]|sum(start=[]) }}"
    "{{ 'a b c'|wordwrap(3) }}{{ 'x%sy'|format(1) }}{{ 'aXa'|replace('a', 'bb') }}",
    "{{ '{x}'.format_map({'x': 1}) }}{{ ''.join(['a', 'b']) }}{{ 'ab'.zfill(4) }}{{ 'a\tb'.expandtabs(4) }}",
]


@pytest.mark.parametrize("template", HELPERS)
def test_environment_helpers_match(template, oracle):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "héllo"}]
    entry = {"text": template}
    try:
        expected = oracle(entry, copy.deepcopy(messages))
    except Exception:
        with pytest.raises(TemplateError):
            render_chat(template, messages, now=NOW)
        return
    assert render_chat(template, messages, now=NOW) == expected


def test_each_failure_has_its_type():
    from tokworker.templates import (TemplateInputError, TemplateRaisedError, TemplateRenderError,
                                     TemplateSyntaxError)
    messages = [{"role": "user", "content": "hi"}]
    cases = [
        (TemplateRaisedError, "{{ raise_exception('roles must alternate') }}", messages, {}),
        (TemplateSyntaxError, "{% for m in messages %}", messages, {}),
        (TemplateRenderError, "{{ messages[0].content.nope() }}", messages, {}),
        (TemplateInputError, "{{ messages }}", [], {}),
        (TemplateInputError, "{{ messages }}", ["not a dict"], {}),
        (TemplateInputError, "{{ messages }}", messages, {"continue_final_message": True}),
        (TemplateInputError, "{{ messages[0].content }}", messages,
         {"continue_final_message": "reasoning_content", "add_generation_prompt": False}),
        (TemplateInputError, "{{ messages }}", messages, {"tools": ["not a schema"]}),
        (TemplateInputError, "{{ messages }}", messages, {"documents": ["not a dict"]}),
    ]
    for error, template, chat, kwargs in cases:
        with pytest.raises(error):
            render_chat(template, chat, **kwargs)
    with pytest.raises(TemplateRaisedError, match="roles must alternate"):
        render_chat(cases[0][1], messages)
