"""The built-in CHATML_TEMPLATE: identical to transformers' rendering of it, and in the expected format."""

from __future__ import annotations

import copy

import pytest

from tests.chat_corpus import CALL_DICT, RESULT_NAMED, SYSTEM, TOOLS, USER, scenarios
from tokworker.templates import TemplateError, render_chat
from tokworker.templates.chatml import CHATML_TEMPLATE


@pytest.fixture(scope="module")
def oracle():
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")),
                                        eos_token="<|im_end|>")
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


@pytest.mark.parametrize("name, messages, kwargs", scenarios(), ids=[s[0] for s in scenarios()])
def test_matches_transformers(name, messages, kwargs, oracle):
    kwargs.setdefault("add_generation_prompt", True)
    try:
        expected = oracle.apply_chat_template(copy.deepcopy(messages), tokenize=False, **copy.deepcopy(kwargs))
    except Exception:   # transformers refuses this input: so must we
        with pytest.raises(TemplateError):
            render_chat(CHATML_TEMPLATE, messages, eos_token="<|im_end|>", **kwargs)
        return
    assert render_chat(CHATML_TEMPLATE, messages, eos_token="<|im_end|>", **kwargs) == expected


def test_format_of_a_tool_round_trip():
    text = render_chat(CHATML_TEMPLATE, [SYSTEM, USER, CALL_DICT, RESULT_NAMED], tools=TOOLS)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant. Answer briefly.\n\n# Tools\n")
    assert '\n{"type": "function", "function": {"name": "get_weather"' in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
            '"unit": "celsius"}}\n</tool_call><|im_end|>\n') in text
    assert text.endswith('<|im_start|>user\n<tool_response>\n{"temp": 18, "sky": "cloudy"}\n</tool_response>'
                         "<|im_end|>\n<|im_start|>assistant\n")


def test_thinking_switch():
    on = render_chat(CHATML_TEMPLATE, [USER])
    off = render_chat(CHATML_TEMPLATE, [USER], enable_thinking=False)
    assert on.endswith("<|im_start|>assistant\n")
    assert off == on + "<think>\n\n</think>\n\n"


def test_reasoning_kept_only_after_the_last_user_turn():
    turn = {"role": "assistant", "content": "18°C.", "reasoning_content": "\nLook it up.\n"}
    last = render_chat(CHATML_TEMPLATE, [USER, turn], add_generation_prompt=False)
    assert last.endswith("<|im_start|>assistant\n<think>\nLook it up.\n</think>\n\n18°C.<|im_end|>\n")
    earlier = render_chat(CHATML_TEMPLATE, [USER, turn, {"role": "user", "content": "ok"}])
    assert "<think>" not in earlier and "<|im_start|>assistant\n18°C.<|im_end|>" in earlier
