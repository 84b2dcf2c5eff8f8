r"""Llama 4 prompts as the model was prompted: llama-models' own ChatFormat (Meta's reference code, which ships
the tokenizer) against tokworker's render of Llama 4's Hugging Face chat template, tokenized, ids compared.

The template is the one transformers 5.24 ships as Llama4Processor's default (the template of Meta's Llama 4
repositories; ../shared/fixtures has no Llama 4 template). Plain chats (system, user, assistant, several turns)
give the same ids. Where the two differ, the test below says how and which one the model saw:
- the system prompt: the template trims it, ChatFormat keeps it as given. Meta's prompt-format examples hold
  system prompts with no surrounding whitespace, so the two agree on every prompt Meta shows; we render the
  template (the trimmed text), as transformers and vLLM do.
- tool calls and results: ChatFormat writes a call in its ToolPromptFormat (JSON by default) and ends the
  turn with <|eom|>, a tool result as raw text under `ipython`, ending with <|eom|>; the template writes
  `<|python_start|>content<|python_end|>{"name": ..., "parameters": ...}<|eot|>` and the result JSON-encoded
  ("sunny", quotes included: a string is iterable to Jinja's test), ending with <|eot|>. The model's own
  answers in Meta's Llama 4 prompt-format document (llama-models, models/llama4/prompt_format.md, "Model
  Response Format") are `[get_weather(city="San Francisco"), ...]<|eot|>`: the pythonic list and <|eot|>,
  which neither writes. tokworker renders whatever template the operator gives (vLLM's llama4_pythonic
  template writes the model's form); the ids of each are pinned here.
- a turn whose text starts with a line break (after any other whitespace): ChatFormat tokenizes each header
  and each text apart, so the header's "\n\n" and the text's "\n" stay two tokens; the template's render
  is one string, tokenized whole, where the pattern's `\s*[\r\n]+` joins them ("\n\n\n" is one token). The text is
  the same. Meta prompted (and trained) through ChatFormat, so its split is the model's; transformers and
  vLLM tokenize the render whole, as tokworker does for any template (a template has no segment bounds).

llama-models' chat_format module imports torch and torchvision at its top for its image path, which the text
path never runs. They are not test dependencies here, so when they are missing the import is given empty
stand-in modules for the duration of the import only (nothing of them is called).
"""

from __future__ import annotations

import copy
import sys
import types

import pytest
import regex
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tests.realdata import vocabulary
from tests.test_trained_ids import CONTENTS, _chats
from tokworker import Tokenizer
from tokworker.tokenizer import loaders

pytest.importorskip("llama_models")
pytest.importorskip("transformers")

_JOINS_HEADER = regex.compile(r"\p{White_Space}*[\r\n]")   # may merge with the header's "\n\n" (see above)


def _chat_format_class():
    """llama-models' Llama 4 ChatFormat, importable without torch (see the module's docstring)."""
    import importlib.util
    stand_ins = {}
    for name in ("torch", "torchvision"):
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            stand_ins[name] = types.ModuleType(name)
    if "torch" in stand_ins:
        stand_ins["torch"].Tensor = type("Tensor", (), {})         # annotations evaluated at import
    if "torchvision" in stand_ins:
        transforms = stand_ins["torchvision.transforms"] = types.ModuleType("torchvision.transforms")
        transforms.functional = stand_ins["torchvision.transforms.functional"] = types.ModuleType(
            "torchvision.transforms.functional")
        stand_ins["torchvision"].transforms = transforms
    sys.modules.update(stand_ins)
    try:
        from llama_models.llama4.chat_format import ChatFormat
    finally:
        for name in stand_ins:
            sys.modules.pop(name, None)
    return ChatFormat


@pytest.fixture(scope="module")
def llama4():
    from llama_models.llama4.tokenizer import Tokenizer as LlamaTokenizer
    from transformers.models.llama4.processing_llama4 import chat_template
    path = vocabulary("llama4_tiktoken")
    reference = _chat_format_class()(LlamaTokenizer(path))
    ours = Tokenizer.from_tiktoken(path, loaders.LLAMA4_PATTERN, loaders.llama4_special_tokens(),
                                   bos_token="<|begin_of_text|>", eos_token="<|eot|>")
    return ours, reference, chat_template


def _render(llama4, messages, **options) -> list[int]:
    ours, _, template = llama4
    return ours.apply_chat_template(copy.deepcopy(messages), chat_template=template, allow_untrusted_template=True,
                                    add_generation_prompt=True, **options)


def _expected(llama4, messages, tool_prompt_format=None) -> list[int]:
    from llama_models.datatypes import RawMessage
    reference = llama4[1]
    raw = [RawMessage(**m) for m in messages]
    if tool_prompt_format is None:
        return reference.encode_dialog_prompt(raw).tokens
    return reference.encode_dialog_prompt(raw, tool_prompt_format).tokens


def test_llama4_vocabulary_is_llama_models(llama4):
    ours, reference, _ = llama4
    assert loaders.llama4_special_tokens() == reference.tokenizer.special_tokens
    assert loaders.LLAMA4_PATTERN == reference.tokenizer.O200K_PATTERN
    assert ours.vocab_size == reference.tokenizer.n_words == 202048
    for text in CONTENTS:
        assert ours.encode(text, add_special_tokens=True) == reference.tokenizer.encode(
            text, bos=True, eos=False, allowed_special="all"), text


def test_llama4_chat_prompts_equal_llama_models_chat_format(llama4):
    for messages in _chats(CONTENTS):
        assert _render(llama4, messages) == _expected(llama4, messages), messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=50),
       answer=st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_llama4_generated_turns_equal_llama_models_chat_format(llama4, content, answer):
    ours = llama4[0]
    assume(not any(token in content + answer for token in ours.added_tokens))   # forged control text: by design
    assume(not _JOINS_HEADER.match(content) and not _JOINS_HEADER.match(answer))  # pinned below
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content},
                {"role": "assistant", "content": answer}, {"role": "user", "content": content}]
    assert _render(llama4, messages) == _expected(llama4, messages)


def test_llama4_text_starting_with_a_line_break_joins_the_header_in_the_render_only(llama4):
    ours = llama4[0]
    for answer in ("\n", "\nSure.", "\n\nSure."):
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": answer},
                    {"role": "user", "content": "ok"}]
        ids, expected = _render(llama4, messages), _expected(llama4, messages)
        assert ours.decode(ids) == ours.decode(expected)
        header_end = 200006                              # <|header_end|>; its "\n\n" is 368
        start = [i for i, token in enumerate(expected) if token == header_end][1] + 1
        assert expected[start] == 368                    # ChatFormat: the header's "\n\n" alone
        assert ids[start] != 368 and ours.decode([ids[start]]).startswith("\n\n")   # the render: joined
        assert ids[:start] == expected[:start]
    for answer in ("  Sure.", " \n\nSure."):       # no line break; or the joined piece's BPE splits it there
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": answer}]
        assert _render(llama4, messages) == _expected(llama4, messages)


def test_llama4_system_prompt_is_trimmed_by_the_template_not_by_chat_format(llama4):
    ours = llama4[0]
    messages = [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "hi"}]
    ids, expected = _render(llama4, messages), _expected(llama4, messages)
    header = [200000, 200005, 15651, 200006, 368]         # <|begin_of_text|><|header_start|>system<|header_end|>\n\n
    assert ids[:5] == expected[:5] == header
    assert ours.decode(ids[5:ids.index(200008)]) == "Be brief."
    assert ours.decode(expected[5:expected.index(200008)]) == "  Be brief.\n"
    trimmed = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert _render(llama4, messages) == _render(llama4, trimmed) == _expected(llama4, trimmed)


def test_llama4_tool_turns_differ_as_documented(llama4):
    from llama_models.datatypes import ToolPromptFormat
    ours = llama4[0]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    from llama_models.datatypes import ToolCall
    raw = [messages[0], {"role": "assistant", "content": "", "tool_calls": [
        ToolCall(call_id="c1", tool_name="get_weather", arguments={"city": "Paris"})]}, {"role": "tool", "content": "sunny"}]
    head = "<|begin_of_text|><|header_start|>user<|header_end|>\n\nWeather in Paris?<|eot|>"
    turn = "<|header_start|>assistant<|header_end|>\n\n"
    rendered = ours.decode(_render(llama4, messages))
    assert rendered == (head + turn + '<|python_start|><|python_end|>{"name": "get_weather", "parameters": {"city": '
                        '"Paris"}}<|eot|><|header_start|>ipython<|header_end|>\n\n"sunny"<|eot|>' + turn)
    as_json = ours.decode(_expected(llama4, raw))
    assert as_json == (head + turn + '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}'
                       "<|eom|><|header_start|>ipython<|header_end|>\n\nsunny<|eom|>" + turn)
    pythonic = ours.decode(_expected(llama4, raw, ToolPromptFormat.python_list))
    assert pythonic == (head + turn + '[get_weather(city="Paris")]<|eom|><|header_start|>ipython<|header_end|>\n\n'
                        "sunny<|eom|>" + turn)
    # the ids, not only the text: each side's ids are its text's encoding (control tokens by id:
    # <|python_start|> 200016, <|python_end|> 200017, <|eom|> 200007, <|eot|> 200008)
    for text, ids in ((rendered, _render(llama4, messages)), (as_json, _expected(llama4, raw))):
        assert ids == ours.encode(text), text
