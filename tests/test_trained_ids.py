"""Ids exactly as each model was trained: every real vocabulary here against the stack its model was trained
and prompted with, through `Tokenizer.apply_chat_template(tokenize=True)` and `encode(add_special_tokens=True)`,
on the multilingual corpus and hypothesis strings.

The rule per family (ARCHITECTURE.md, "Which reference decides the ids"):
- Mistral (SentencePiece v1/v3, Tekken): mistral-common's `encode_chat_completion`, how Mistral models were
  prompted. It encodes each piece of content on its own (SentencePiece adds its dummy prefix to each) between
  control-token ids. A chat template writes that prefix as a space after the control token ("[INST] " +
  content); tokworker reads that one space as the prefix (AddedVocabulary.split, space_is_prefix), where
  `tokenizers` prepends another and writes an extra "▁" (29473). Plain text follows `sentencepiece`, where
  transformers 5.24 (which rebuilds LlamaTokenizer with prepend_scheme "first") drops the prefix before a
  leading space.
- tiktoken-born vocabularies (Llama 3, Llama 4, cl100k, Qwen's .tiktoken): `tiktoken`, and for Llama 3 the
  prompt ids of llama-models' own ChatFormat.
- tokenizer.json vocabularies (DeepSeek, Qwen3, BERT): `tokenizers`, which trained them; transformers'
  AutoTokenizer agrees on the real folders. Where transformers 5.24 rebuilds a pipeline from
  tokenizer_config.json's `tokenizer_class` (GPT2Tokenizer, LlamaTokenizer), its ids differ from the file's
  and from the training library: tokworker follows the file (tests below build such folders).
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tokworker import Tokenizer
from tests.realdata import vocabulary
from bench.sentencepiece_convert import convert
from tests.tokenizer_corpus import CORPUS

mistral_common = pytest.importorskip("mistral_common")
from mistral_common.protocol.instruct.messages import (AssistantMessage, SystemMessage, ToolMessage,  # noqa: E402
                                                       UserMessage)
from mistral_common.protocol.instruct.request import ChatCompletionRequest  # noqa: E402
from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall  # noqa: E402
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402

# Mistral's v3 layout as mistral-common writes it; `sep` is the space a SentencePiece template writes after a
# control token (the dummy prefix), "" for Tekken, which has none.
MISTRAL_V3_TEMPLATE = r"""
{%- set system = messages | selectattr('role', 'equalto', 'system') | map(attribute='content') | list -%}
{%- set chat = messages | rejectattr('role', 'equalto', 'system') | list -%}
{%- set ns = namespace(last=-1) -%}
{%- for m in chat %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor -%}
{{- bos_token -}}
{%- for m in chat -%}
  {%- if m.role == 'user' -%}
    {%- if loop.index0 == ns.last and tools -%}
      [AVAILABLE_TOOLS]{{ sep }}[{% for t in tools %}{{ t | tojson }}{{ ', ' if not loop.last }}{% endfor %}][/AVAILABLE_TOOLS]
    {%- endif -%}
    [INST]{{ sep }}{% if loop.index0 == ns.last and system %}{{ system | join('\n\n') }}{{ '\n\n' }}{% endif %}{{ m.content }}[/INST]
  {%- elif m.role == 'assistant' and m.tool_calls -%}
    [TOOL_CALLS]{{ sep }}[{% for c in m.tool_calls %}{"name": {{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}, "id": {{ c.id | tojson }}}{{ ', ' if not loop.last }}{% endfor %}]{{ eos_token }}
  {%- elif m.role == 'assistant' -%}
    {{ sep }}{{ m.content }}{{ eos_token }}
  {%- elif m.role == 'tool' -%}
    [TOOL_RESULTS]{{ sep }}{"content": {{ m.content | tojson }}, "call_id": {{ m.tool_call_id | tojson }}}[/TOOL_RESULTS]
  {%- endif -%}
{%- endfor -%}"""

# v1: [INST] is text there, the system prompt joins the first user turn
MISTRAL_V1_TEMPLATE = r"""
{%- set system = messages | selectattr('role', 'equalto', 'system') | map(attribute='content') | list -%}
{{- bos_token -}}
{%- for m in messages | rejectattr('role', 'equalto', 'system') -%}
  {%- if m.role == 'user' -%}
    [INST] {% if loop.first and system %}{{ system | join('\n\n') }}{{ '\n\n' }}{% endif %}{{ m.content }} [/INST]
  {%- else -%}
    {{ ' ' + m.content + eos_token }}
  {%- endif -%}
{%- endfor -%}"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
CONTENTS = [text for text in CORPUS if text.strip()]


class Mistral:
    """One Mistral vocabulary: ours (from the file the model ships) beside mistral-common's tokenizer."""

    def __init__(self, name: str, ours: Tokenizer, template: str, sep: str):
        self.name, self.ours, self.template, self.sep = name, ours, template, sep
        self.reference = MistralTokenizer.from_file(str(vocabulary(name)))

    def __repr__(self) -> str:
        return f"Mistral({self.name})"

    def ids(self, messages, tools=None) -> list[int]:
        return self.ours.apply_chat_template(copy.deepcopy(messages), tools=tools, chat_template=self.template,
                                             allow_untrusted_template=True, sep=self.sep)

    def expected(self, messages, tools=None) -> list[int]:
        request = ChatCompletionRequest(messages=[_mistral_message(m) for m in messages],
                                        tools=[Tool(function=Function(**t["function"])) for t in tools or []])
        return self.reference.encode_chat_completion(request).tokens


def _mistral_message(message: dict):
    role, content = message["role"], message.get("content")
    if role == "system":
        return SystemMessage(content=content)
    if role == "user":
        return UserMessage(content=content)
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=message["tool_call_id"])
    calls = [ToolCall(id=c["id"], function=FunctionCall(name=c["function"]["name"],
                                                        arguments=json.dumps(c["function"]["arguments"])))
             for c in message.get("tool_calls") or []]
    return AssistantMessage(content=content, tool_calls=calls or None)


def _sentencepiece_tokenizer(name: str) -> Tokenizer:
    return Tokenizer.from_spec(convert(str(vocabulary(name))),
                               {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})


def _tekken_tokenizer(tmp: Path) -> Tokenizer:
    """A folder with only tekken.json, as Mistral's repositories ship it (tests/test_tekken.py checks the rest)."""
    (tmp / "tekken.json").symlink_to(vocabulary("mistral_tekken"))
    return Tokenizer.from_dir(tmp)


@pytest.fixture(scope="module", params=["mistral_v3_sp", "mistral_tekken", "mistral_v1_sp"])
def mistral(request, tmp_path_factory) -> Mistral:
    if request.param == "mistral_tekken":
        return Mistral(request.param, _tekken_tokenizer(tmp_path_factory.mktemp("tekken")), MISTRAL_V3_TEMPLATE, "")
    template = MISTRAL_V1_TEMPLATE if request.param == "mistral_v1_sp" else MISTRAL_V3_TEMPLATE
    return Mistral(request.param, _sentencepiece_tokenizer(request.param), template, " ")


def _chats(contents):
    """Real chat shapes around each content: one turn, a system prompt, several turns."""
    for content in contents:
        yield [{"role": "user", "content": content}]
        yield [{"role": "system", "content": "You are terse."}, {"role": "user", "content": content}]
        yield [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content.strip() or "ok"},
               {"role": "user", "content": content}]


def _tool_chat(result: str):
    call = {"id": "abcdefghi", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    return [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "abcdefghi", "content": result},
            {"role": "assistant", "content": "It is sunny."}, {"role": "user", "content": "Thanks!"}]


def test_mistral_chat_prompts_equal_mistral_common(mistral):
    for messages in _chats(CONTENTS):
        assert mistral.ids(messages) == mistral.expected(messages), messages


def test_mistral_tool_chats_equal_mistral_common(mistral):
    if mistral.name == "mistral_v1_sp":
        pytest.skip("v1 has no tool format")
    # (a result that is itself JSON is embedded as an object by mistral-common: a template matter, not ids)
    for result in ("sunny, 24 C", "temp: 24; sky [clear]", "  spaced out  ", "line\nbreaks\n\nhere", "日本 ☀"):
        messages = _tool_chat(result)
        assert mistral.ids(messages, TOOLS) == mistral.expected(messages, TOOLS), result


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40))
def test_mistral_generated_content_equals_mistral_common(mistral, content):
    assume(content.strip())
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]
    try:
        expected = mistral.expected(messages)
    except Exception:            # mistral-common's own validation refused the content: nothing to compare
        assume(False)
    assert mistral.ids(messages) == expected


def test_the_dummy_prefix_rule_on_mistral_v3():
    """The three references disagree; each text says which one we follow."""
    ours = _sentencepiece_tokenizer("mistral_v3_sp")
    sentencepiece = pytest.importorskip("sentencepiece")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(vocabulary("mistral_v3_sp")))
    # after a control token, the template's space is the prefix: mistral-common (and transformers) agree,
    # tokenizers writes [3, 29473, 2592]
    assert ours.encode("[INST] What") == [3] + sp.encode("What") == [3, 2592]
    assert ours.encode("[INST]     line text") == [3] + sp.encode("    line text")
    assert ours.encode("[/INST] Hello there</s>") == [4] + sp.encode("Hello there") + [2]
    # plain text keeps SentencePiece's prefix before leading spaces: sentencepiece (and tokenizers) agree,
    # transformers 5.24's LlamaTokenizer gives [3055, 2175, 3013] here
    for text in ("    line text", "  two", " ", "\tx", " \n y"):
        assert ours.encode(text) == sp.encode(text), text
        assert ours.encode(text, add_special_tokens=True) == [1] + sp.encode(text), text


@pytest.mark.parametrize("name", ["mistral_v3_sp", "mistral_v1_sp"])
def test_sentencepiece_plain_text_equals_sentencepiece(name):
    sentencepiece = pytest.importorskip("sentencepiece")
    ours = _sentencepiece_tokenizer(name)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(vocabulary(name)))
    for text in CORPUS:
        if any(control in text for control in ("<s>", "</s>", "<unk>", "[INST]", "[/INST]")):
            continue                       # literal control text: sentencepiece reads it as text (TRAPS.md)
        assert ours.encode(text, add_special_tokens=True) == [1] + sp.encode(text), text


# ------------------------------------------------------------------ tiktoken-born vocabularies
LLAMA3_TEMPLATE = (r"{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>"
                   "\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def test_llama3_chat_prompts_equal_llama_models_chat_format():
    pytest.importorskip("llama_models")
    from llama_models.datatypes import RawMessage
    from llama_models.llama3.chat_format import ChatFormat
    from llama_models.llama3.tokenizer import Tokenizer as LlamaTokenizer
    from tokworker.tokenizer import loaders
    path = vocabulary("llama3_tiktoken")
    reference = ChatFormat(LlamaTokenizer(path))
    ours = Tokenizer.from_tiktoken(path, loaders.LLAMA3_PATTERN, loaders.llama3_special_tokens(),
                                   bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    for messages in _chats(CONTENTS):
        # llama-models encodes the content as given; Llama 3's template trims it, so compare trimmed content
        messages = [{**m, "content": m["content"].strip()} for m in messages]
        expected = reference.encode_dialog_prompt([RawMessage(**m) for m in messages]).tokens
        # ChatFormat ends with the assistant header (its generation prompt)
        ids = ours.apply_chat_template(messages, chat_template=LLAMA3_TEMPLATE, allow_untrusted_template=True,
                                       add_generation_prompt=True)
        assert ids == expected, messages


@lru_cache(maxsize=None)
def _tiktoken_pair(name: str):
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe
    from tokworker.tokenizer import loaders
    cases = {"llama3_tiktoken": (loaders.LLAMA3_PATTERN, loaders.llama3_special_tokens(), "<|begin_of_text|>"),
             "cl100k_tiktoken": (loaders.CL100K_PATTERN, loaders.CL100K_SPECIAL_TOKENS, None),
             "qwen_tiktoken": (loaders.QWEN_PATTERN, loaders.qwen_special_tokens(), None)}
    pattern, specials, bos = cases[name]
    path = vocabulary(name)
    reference = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(str(path)),
                                  special_tokens=specials)
    return Tokenizer.from_tiktoken(path, pattern, specials, bos_token=bos), reference


@pytest.mark.parametrize("name", ["llama3_tiktoken", "cl100k_tiktoken", "qwen_tiktoken"])
def test_tiktoken_born_encode_with_special_tokens_equals_tiktoken(name):
    ours, reference = _tiktoken_pair(name)
    bos = [ours.bos_token_id] if ours.bos_token is not None else []
    for text in CORPUS:
        assert ours.encode(text, add_special_tokens=True) == bos + reference.encode(text, allowed_special="all"), text


@settings(max_examples=60, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=50))
def test_tiktoken_born_generated_text_equals_tiktoken(text):
    for name in ("llama3_tiktoken", "cl100k_tiktoken"):
        ours, reference = _tiktoken_pair(name)
        assert ours.encode(text, split_special_tokens=True) == reference.encode_ordinary(text)


# ------------------------------------------------------------------ tokenizer.json vocabularies
@pytest.mark.slow  # a sweep of several seconds
def test_real_folders_chat_prompts_equal_transformers():
    """Qwen3's real folder: tokenizers trained it and transformers' AutoTokenizer serves it unchanged."""
    transformers = pytest.importorskip("transformers")
    folder = vocabulary("qwen3_dir")
    ours, reference = Tokenizer.from_dir(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    for messages in _chats(CONTENTS):
        # content that spells a control token is encoded as text by design (README, "Control tokens that
        # content can't forge"); transformers matches it as the token, so compare those without sanitizing
        forged = any(token in m["content"] for m in messages for token in ours.added_tokens)
        for tools in (None, TOOLS):
            expected = reference.apply_chat_template(copy.deepcopy(messages), tools=tools, tokenize=True,
                                                     add_generation_prompt=True, return_dict=False)
            ids = ours.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                           sanitize_control_tokens=not forged)
            assert ids == list(expected), messages


@pytest.mark.parametrize("name", ["deepseek", "qwen3_dir", "bert_wordpiece"])
def test_tokenizer_json_encode_with_special_tokens_equals_tokenizers(name):
    import tokenizers
    path = vocabulary(name)
    file = path / "tokenizer.json" if path.is_dir() else path
    ours, reference = Tokenizer.from_file(file), tokenizers.Tokenizer.from_file(str(file))
    reference.no_truncation()
    reference.no_padding()
    for text in CORPUS:
        assert ours.encode(text, add_special_tokens=True) == reference.encode(text).ids, text


# ------------------------------------------------------------------ where transformers 5.24 rebuilds the pipeline
def _folder(tmp: Path, spec: dict, **config) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (tmp / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp


@pytest.mark.slow  # a sweep of several seconds
def test_gpt2_tokenizer_class_on_a_modern_split_follows_the_file(tmp_path):
    """cl100k-style and OLMo folders declare GPT2Tokenizer: transformers 5.24 then splits with GPT-2's regex
    (digit runs whole, contractions case-sensitive) and ignores the file's Split. The model was trained with
    the file's (tiktoken's or tokenizers') split, so we follow the file; transformers differs."""
    transformers = pytest.importorskip("transformers")
    import tokenizers
    spec = json.loads((vocabulary("qwen3_dir") / "tokenizer.json").read_text(encoding="utf-8"))
    folder = _folder(tmp_path / "gpt2class", spec, tokenizer_class="GPT2Tokenizer", eos_token="<|endoftext|>")
    ours, trained = Tokenizer.from_dir(folder), tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    rebuilt = transformers.AutoTokenizer.from_pretrained(str(folder))
    differ = 0
    for text in CORPUS:
        assert ours.encode(text) == trained.encode(text, add_special_tokens=False).ids, text
        differ += rebuilt.encode(text, add_special_tokens=False) != ours.encode(text)
    assert differ                          # "12345 numbers ...": Qwen's split is digit by digit, GPT-2's is not


def test_starcoder_style_digits_follow_the_file(tmp_path):
    """StarCoder's pipeline isolates every digit (Digits(individual_digits=True)) before its byte-level BPE;
    transformers 5.24's GPT2Tokenizer rebuild drops that step, so digit runs get other ids."""
    transformers = pytest.importorskip("transformers")
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers
    # a vocabulary that holds multi-digit tokens (as StarCoder's does), used with StarCoder's digit split
    learner = tokenizers.Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    learner.decoder = decoders.ByteLevel()
    learner.train_from_iterator(CORPUS * 20 + ["1234567890 2024 31415 100000"] * 50, trainers.BpeTrainer(
        vocab_size=700, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    spec = json.loads(learner.to_str())
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    folder = _folder(tmp_path / "starcoder", spec, tokenizer_class="GPT2Tokenizer", eos_token="<|endoftext|>")
    trained = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    ours, rebuilt = Tokenizer.from_dir(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    for text in CORPUS:
        assert ours.encode(text) == trained.encode(text).ids, text
    digits = "call 1234567890 in 2024"
    assert ours.encode(digits) == trained.encode(digits).ids != rebuilt.encode(digits, add_special_tokens=False)


def test_llama_tokenizer_class_plain_text_follows_sentencepiece(tmp_path):
    """Mistral v3's folder declares LlamaTokenizer: transformers 5.24 rebuilds it with prepend_scheme "first"
    and drops the dummy prefix before a leading space; sentencepiece (the training stack) keeps it."""
    transformers = pytest.importorskip("transformers")
    sentencepiece = pytest.importorskip("sentencepiece")
    model = str(vocabulary("mistral_v3_sp"))
    folder = _folder(tmp_path / "mistral", convert(model), tokenizer_class="LlamaTokenizer", bos_token="<s>",
                     eos_token="</s>", unk_token="<unk>")
    ours, rebuilt = Tokenizer.from_dir(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    text = "    line text"
    assert ours.encode(text) == sp.encode(text) == [1028, 2175, 3013]
    assert rebuilt.encode(text, add_special_tokens=False) != sp.encode(text)
    # and where the chat prompt is concerned, transformers agrees with mistral-common (and with us)
    assert rebuilt.encode("[INST] What", add_special_tokens=False) == ours.encode("[INST] What") == [3, 2592]


# ------------------------------------------------------------------ through the pool
@pytest.mark.slow  # a worker process
def test_mistral_prompt_ids_through_the_pool(tmp_path):
    import uvloop
    from tokworker.frontend import TokenizerPool
    reference = Mistral("mistral_v3_sp", _sentencepiece_tokenizer("mistral_v3_sp"), MISTRAL_V3_TEMPLATE, " ")
    folder = _folder(tmp_path / "mistral_v3", convert(str(vocabulary("mistral_v3_sp"))), bos_token="<s>",
                     eos_token="</s>", unk_token="<unk>")
    (folder / "chat_template.jinja").write_text(MISTRAL_V3_TEMPLATE)
    chats = list(_chats(CONTENTS[:8])) + [_tool_chat("sunny")]

    async def main():
        async with await TokenizerPool.spawn(folder, workers=1) as pool:
            return [(await pool.render(m, tools=TOOLS if len(m) > 3 else None, add_generation_prompt=False,
                                       sep=" ")).ids for m in chats]

    got = uvloop.run(main())
    for messages, ids in zip(chats, got):
        assert ids == reference.expected(messages, TOOLS if len(messages) > 3 else None), messages
