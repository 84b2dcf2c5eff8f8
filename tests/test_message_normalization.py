"""OpenAI-shaped messages are rendered as vLLM's server renders them: the oracle is transformers' render of
the messages vLLM's chat_utils would hand the template, written out here by hand for each of the 36
fixture templates (text parts joined or kept as parts, `content: null`, arguments parsed).
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.chat_corpus import TOOLS
from tests.realdata import chat_templates, vocabulary
from tests.test_template_injection import load
from tokworker.templates import Limits, TemplateError, TemplateInputError
from tokworker.templates.apply import render_chat_prompt
from tokworker.templates.messages import template_shape

TEMPLATES = chat_templates()

#: the templates that loop over a message's content (`for block in message['content']`), read off the
#: files: vLLM's "openai" content format; every other one gets "string" content.
LOOPS_OVER_CONTENT = {"GLM-4.6.jinja", "MiniMax-M2.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                      "ibm-granite-granite-4.0.jinja", "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
                      "moonshotai-Kimi-K2.jinja", "unsloth-Apriel-1.5.jinja",
                      "unsloth-mistral-Devstral-Small-2507.jinja",
                      "vllm-examples-tool_chat_template_llama3.1_json.jinja"}
#: the templates that add a call's bare arguments to a string with `+`: they get JSON text
ARGUMENTS_AS_TEXT = {"Apertus-8B-Instruct.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                     "deepseek-ai-DeepSeek-V3.1.jinja", "fireworks-ai-llama-3-firefunction-v2.jinja",
                     "meetkai-functionary-medium-v3.1.jinja", "meetkai-functionary-medium-v3.2.jinja"}
ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'


def openai_chat(arguments=ARGUMENTS):
    """What an OpenAI client sends: parts, a tool-only assistant turn with null content, a string of
    arguments, a tool result in parts."""
    return [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Weather in"}, {"type": "text", "text": "Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call12345",
         "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "20 C"}]},
        {"role": "assistant", "content": "It is sunny.", "tool_calls": []},
        {"role": "user", "content": "Thanks"},
    ]


def vllm_view(file: str) -> list[dict]:
    """The same conversation as vLLM's server passes it to this template."""
    parts = file in LOOPS_OVER_CONTENT

    def content(*texts):
        return [{"type": "text", "text": text} for text in texts] if parts else "\n".join(texts)
    arguments = ARGUMENTS if file in ARGUMENTS_AS_TEXT else json.loads(ARGUMENTS)
    return [
        {"role": "system", "content": content("Be brief.")},
        {"role": "user", "content": content("Weather in", "Paris?")},
        {"role": "assistant", "content": content(), "tool_calls": [
            {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call12345", "content": "sunny\n20 C"},
        {"role": "assistant", "content": content("It is sunny.")},
        {"role": "user", "content": content("Thanks")},
    ]


@pytest.fixture(scope="module")
def reference():
    transformers = pytest.importorskip("transformers")
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(vocabulary("qwen3_dir") / "tokenizer.json"))


def _specials(entry) -> dict:
    return {"bos_token": entry.get("bos_token") or "", "eos_token": entry.get("eos_token") or ""}


#: this test is about what is rendered, not how fast: a loaded machine must not trip the 1 s budget
UNHURRIED = Limits(time_budget=30.0)


def _ours(template, messages, **kwargs):
    text, _ = render_chat_prompt(load("qwen3_dir"), copy.deepcopy(messages), tools=TOOLS, chat_template=template,
                                 tokenize=False, add_generation_prompt=True, allow_untrusted_template=True,
                                 limits=UNHURRIED, **kwargs)
    return text


def test_content_format_and_arguments_are_read_from_the_template():
    if not TEMPLATES:
        pytest.skip("../shared/fixtures/chat_templates is not present")
    assert {f for f, e in TEMPLATES.items() if template_shape(e["text"]).content_parts} == LOOPS_OVER_CONTENT
    assert {f for f, e in TEMPLATES.items() if template_shape(e["text"]).arguments_as_text} == ARGUMENTS_AS_TEXT


@pytest.mark.parametrize("file", sorted(TEMPLATES) or ["missing"])
def test_every_fixture_renders_what_vllm_renders(file, reference):
    if file not in TEMPLATES:
        pytest.skip("../shared/fixtures/chat_templates is not present")
    entry = TEMPLATES[file]
    template, specials = entry["text"], _specials(entry)
    try:
        expected = reference.apply_chat_template(vllm_view(file), tools=TOOLS, chat_template=template,
                                                 tokenize=False, add_generation_prompt=True, **specials)
    except Exception as error:      # the template refuses this conversation (strict roles, ...): so must we
        with pytest.raises(TemplateError):
            _ours(template, openai_chat(), openai_messages=True, **specials)
        pytest.skip(f"transformers can't render vLLM's view with {file}: {type(error).__name__}: {error}")
    assert _ours(template, openai_chat(), openai_messages=True, **specials) == expected
    # arguments given as an object render the same as the JSON string
    assert _ours(template, openai_chat(json.loads(ARGUMENTS)), openai_messages=True, **specials) == expected


def test_without_normalization_qwen3_crashes_and_llama3_prints_a_repr():
    """What users saw: transformers' view of the raw OpenAI shape."""
    if not TEMPLATES:
        pytest.skip("../shared/fixtures/chat_templates is not present")
    qwen = TEMPLATES["Qwen-Qwen3-0.6B.jinja"]["text"]
    with pytest.raises(TemplateError):
        _ours(qwen, openai_chat())
    assert "Weather in\nParis?" in _ours(qwen, openai_chat(), openai_messages=True)
    llama = TEMPLATES["meta-llama-Llama-3.3-70B-Instruct.jinja"]
    with pytest.raises(TemplateError, match="single tool-calls"):     # `tool_calls: []` on a text turn
        _ours(llama["text"], openai_chat(), **_specials(llama))
    without_empty_calls = openai_chat()
    del without_empty_calls[4]["tool_calls"]
    raw = _ours(llama["text"], without_empty_calls, **_specials(llama))
    assert "[{'type': 'text'" in raw
    normalized = _ours(llama["text"], openai_chat(), openai_messages=True, **_specials(llama))
    assert "{'type'" not in normalized and "Weather in\nParis?" in normalized


def test_arguments_that_are_not_json_become_an_empty_object_as_in_vllm():
    if not TEMPLATES:
        pytest.skip("../shared/fixtures/chat_templates is not present")
    qwen = TEMPLATES["Qwen-Qwen3-0.6B.jinja"]["text"]
    assert _ours(qwen, openai_chat("{broken"), openai_messages=True) == \
        _ours(qwen, openai_chat("{}"), openai_messages=True)
    deepseek = TEMPLATES["deepseek-ai-DeepSeek-V3.1.jinja"]
    text = _ours(deepseek["text"], openai_chat('{"city":"Paris"}'), openai_messages=True, **_specials(deepseek))
    assert '{"city":"Paris"}' in text          # a text-gluing template gets the caller's own JSON text


@pytest.mark.parametrize("content, message", [
    ([{"type": "image_url", "image_url": {"url": "http://x"}}], "image_url"),
    ([{"text": "no type"}], "None"), (42, "int")])
def test_parts_other_than_text_are_refused_with_a_typed_error(content, message):
    with pytest.raises(TemplateInputError, match=message):
        _ours("{{ messages[0].content }}", [{"role": "user", "content": content}], openai_messages=True)


def test_the_worker_normalizes_what_it_receives():
    """A Render request to a worker carries OpenAI-shaped messages and gets vLLM's rendering."""
    if not TEMPLATES:
        pytest.skip("../shared/fixtures/chat_templates is not present")
    from tokworker.protocol.messages import Render
    from tokworker.worker.handlers import Handlers
    from tokworker.worker.options import WorkerOptions
    qwen = TEMPLATES["Qwen-Qwen3-0.6B.jinja"]["text"]
    handlers = Handlers(load("qwen3_dir"), WorkerOptions(model_dir="unused", bind="ipc:///unused",
                                                         allow_request_templates=True))
    reply = handlers.render(Render(messages=openai_chat(), tools=TOOLS, chat_template=qwen, return_text=True))
    assert reply.text == _ours(qwen, openai_chat(), openai_messages=True)
    assert reply.ids == load("qwen3_dir").encode(reply.text)


def test_fields_are_kept_as_vllm_keeps_them():
    from tokworker.templates.messages import normalize_openai_messages
    string_template = "{{ messages }}"
    messages = [{"role": "user", "content": [{"type": "thinking", "thinking": "hm"}, "plain"], "name": "ann",
                 "extra": 1, "tool_calls": [{"function": {"name": "f"}}]},
                {"role": "assistant", "content": None, "reasoning_content": "because", "tool_call_id": "x"},
                {"role": "tool", "tool_call_id": "call12345", "content": "ok", "name": 7}]
    assert normalize_openai_messages(messages, string_template) == [
        {"role": "user", "content": "hm\nplain", "name": "ann"},
        {"role": "assistant", "content": "", "reasoning": "because", "reasoning_content": "because"},
        {"role": "tool", "content": "ok", "tool_call_id": "call12345"}]
    with pytest.raises(TemplateInputError, match="role"):
        normalize_openai_messages([{"content": "hi"}], string_template)
    with pytest.raises(TemplateInputError, match="type"):
        normalize_openai_messages([{"role": "user", "content": [{"type": ["text"]}]}], string_template)
