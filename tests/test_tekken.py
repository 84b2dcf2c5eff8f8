"""Mistral's tekken.json, read from a model folder that holds only that file (as Mistral's own repositories ship
it), against mistral-common's own Tekkenizer: plain encode with and without <s>/</s>, the special tokens, decode,
and chat prompts (Mistral Nemo's real template vs `encode_chat_completion`, tools too), through
`Tokenizer.apply_chat_template(tokenize=True)` and through the pool.

Decode: `decode(ids)` is mistral-common's SpecialTokenPolicy.KEEP and `decode(ids, skip_special_tokens=True)`
its IGNORE (mistral-common's default, and what vLLM asks for), with one difference: mistral-common decodes each
run of ordinary ids between special tokens on its own, so a UTF-8 character whose bytes a skipped special token
separates becomes two U+FFFD there; tokworker joins the bytes as `tokenizers` does for the same model's
tokenizer.json (and as a stream must, token by token). See test_decode_of_a_character_split_by_a_control_token.
"""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tests.realdata import CHAT_TEMPLATES, vocabulary
from tests.test_trained_ids import TOOLS, _chats, _mistral_message, _tool_chat
from tests.tokenizer_corpus import CORPUS
from tokworker import Tokenizer
from tokworker.tokenizer.errors import MalformedVocabulary

pytest.importorskip("mistral_common")
from mistral_common.protocol.instruct.request import ChatCompletionRequest  # noqa: E402
from mistral_common.protocol.instruct.tool_calls import Function, Tool  # noqa: E402
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy  # noqa: E402
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402
from mistral_common.tokens.tokenizers.tekken import Tekkenizer  # noqa: E402

NEMO_TEMPLATE = CHAT_TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja"
CONTENTS = [text for text in CORPUS if text.strip()]
# "tekken_240718" is Mistral Nemo's tokenizer (2407), "tekken_240911" Pixtral's: both lists no special_tokens
FILES = ["mistral_tekken_nemo", "mistral_tekken"]


class Tekken:
    """Ours, from a folder holding only tekken.json, beside mistral-common's tokenizer of the same file."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ours = Tokenizer.from_dir(folder)
        self.mistral = MistralTokenizer.from_file(str(folder / "tekken.json"))
        self.reference: Tekkenizer = self.mistral.instruct_tokenizer.tokenizer

    def expected_chat(self, messages, tools=None) -> list[int]:
        request = ChatCompletionRequest(messages=[_mistral_message(m) for m in messages],
                                        tools=[Tool(function=Function(**t["function"])) for t in tools or []])
        return self.mistral.encode_chat_completion(request).tokens


def _tekken_folder(tmp: Path, name: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "tekken.json").symlink_to(vocabulary(name))
    return tmp


@pytest.fixture(scope="module", params=FILES)
def tekken(request, tmp_path_factory) -> Tekken:
    return Tekken(_tekken_folder(tmp_path_factory.mktemp(request.param), request.param))


@pytest.fixture(scope="module")
def nemo(tmp_path_factory) -> Tekken:
    if not NEMO_TEMPLATE.exists():
        pytest.skip("../shared/fixtures/chat_templates is not here")
    return Tekken(_tekken_folder(tmp_path_factory.mktemp("nemo"), "mistral_tekken_nemo"))


def test_a_tekken_folder_has_mistral_commons_vocabulary(tekken):
    ours, reference = tekken.ours, tekken.reference
    assert ours.vocab_size == reference.n_words == 131072
    count = reference.num_special_tokens
    assert ours.special_ids == frozenset(range(count)) == frozenset(reference.special_ids)
    assert [ours.id_to_token(i) for i in range(count)] == [reference.id_to_piece(i) for i in range(count)]
    assert (ours.id_to_token(3), ours.id_to_token(19), ours.id_to_token(20)) == ("[INST]", "[TOOL_CONTENT]", "<SPECIAL_20>")
    assert (ours.bos_token_id, ours.eos_token_ids) == (reference.bos_id, [reference.eos_id]) == (1, [2])
    assert ours.token_to_id("<pad>") == reference.pad_id
    for token_id in (count, count + 255, 5000, reference.n_words - 1):
        assert ours.token_bytes(token_id) == reference.id_to_byte_piece(token_id), token_id


def test_plain_encode_equals_tekkenizer(tekken):
    ours, reference = tekken.ours, tekken.reference
    eos = ours.eos_token_ids[0]
    for text in CORPUS:
        # Tekkenizer.encode reads control-token text as text; ours matches added tokens unless told not to
        assert ours.encode(text, split_special_tokens=True) == reference.encode(text, bos=False, eos=False), text
        with_bos = ours.encode(text, add_special_tokens=True, split_special_tokens=True)
        assert with_bos == reference.encode(text, bos=True, eos=False), text
        assert with_bos + [eos] == reference.encode(text, bos=True, eos=True), text
    # the difference, spelled out: "[INST]" in text is the control token for us (as tokenizer.json folders
    # have it), and text for Tekkenizer.encode; prompts never hold caller text as control tokens either way
    assert ours.encode("[INST]hi") == [3] + reference.encode("hi", bos=False, eos=False)
    assert ours.encode("[INST]hi", split_special_tokens=True) == reference.encode("[INST]hi", bos=False, eos=False)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_generated_text_encodes_as_tekkenizer(tekken, text):
    assert tekken.ours.encode(text, add_special_tokens=True, split_special_tokens=True) == \
        tekken.reference.encode(text, bos=True, eos=False)


def test_decode_equals_mistral_common(tekken):
    ours, reference = tekken.ours, tekken.reference
    for text in CORPUS:
        ids = [1, 3] + reference.encode(text, bos=False, eos=False) + [4] + reference.encode(text, bos=False, eos=True)
        assert ours.decode(ids) == reference.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP), text
        assert ours.decode(ids, skip_special_tokens=True) == tekken.mistral.decode(ids) == text + text, text


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.one_of(st.integers(0, 30), st.integers(1000, 1300), st.integers(0, 131071)), max_size=24))
def test_decode_of_generated_ids_equals_mistral_common(tekken, ids):
    reference = tekken.reference
    assert tekken.ours.decode(ids) == reference.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP)
    ordinary = [i for i in ids if i >= reference.num_special_tokens]
    # IGNORE equals ours wherever no special token splits a character (see the module's docstring)
    assert tekken.ours.decode(ids, skip_special_tokens=True) == reference.decode(ordinary)


def test_decode_of_a_character_split_by_a_control_token(tekken):
    """The one difference: "é" is bytes C3 A9 (ids 1195, 1169); with [INST] (3) between them and skipped,
    mistral-common decodes [1195] and [1169] apart, tokworker (like tokenizers) joins the bytes."""
    ids = [1000 + 0xC3, 3, 1000 + 0xA9]
    assert tekken.reference.decode(ids) == "\ufffd\ufffd"
    assert tekken.ours.decode(ids, skip_special_tokens=True) == "é"
    assert tekken.ours.decode(ids) == tekken.reference.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP) \
        == "\ufffd[INST]\ufffd"


# ------------------------------------------------------------------ chat prompts: Nemo's template on Nemo's tekken
def _render(nemo: Tekken, messages, tools=None) -> list[int]:
    return nemo.ours.apply_chat_template(copy.deepcopy(messages), tools=tools, chat_template=NEMO_TEMPLATE.read_text(),
                                         allow_untrusted_template=True)


@pytest.mark.slow  # a sweep of several seconds
def test_nemo_chat_prompts_equal_mistral_common(nemo):
    for messages in _chats(CONTENTS):
        assert _render(nemo, messages) == nemo.expected_chat(messages), messages


def test_nemo_tool_chats_equal_mistral_common(nemo):
    """Calls, results and the tools list as mistral-common writes them. One difference is the template's, not
    the ids': Nemo's template writes a tool result as it is ({"content": sunny, ...}) where mistral-common,
    which Mistral trained with, writes it as a JSON string ({"content": "sunny", ...}); a result that is
    itself JSON is the same in both. A caller serving Nemo with this template should send text results
    JSON-encoded (shown here: then the ids are mistral-common's)."""
    for result in ('{"temp": 24, "sky": "clear"}', "[1, 2, 3]", "24"):
        messages = _tool_chat(result)
        assert _render(nemo, messages, TOOLS) == nemo.expected_chat(messages, TOOLS), result
    for result in ("sunny, 24 C", "  spaced out  ", "日本 ☀", 'say "hi"'):
        messages = _tool_chat(result)
        expected = nemo.expected_chat(messages, TOOLS)
        assert _render(nemo, messages, TOOLS) != expected, result
        quoted = _tool_chat(json.dumps(result, ensure_ascii=False))
        assert _render(nemo, quoted, TOOLS) == expected, result


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40))
def test_nemo_generated_content_equals_mistral_common(nemo, content):
    assume(content.strip())
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]
    try:
        expected = nemo.expected_chat(messages)
    except Exception:            # mistral-common's own validation refused the content: nothing to compare
        assume(False)
    assert _render(nemo, messages) == expected


@pytest.mark.slow  # a worker process
def test_a_tekken_folder_through_the_pool(nemo):
    import uvloop
    from tokworker.frontend import TokenizerPool
    chats = list(_chats(CONTENTS[:6])) + [_tool_chat('{"temp": 24}')]

    async def main():
        async with await TokenizerPool.spawn(nemo.folder, workers=1, chat_template=str(NEMO_TEMPLATE)) as pool:
            rendered = [(await pool.render(m, tools=TOOLS if len(m) > 3 else None, add_generation_prompt=False)).ids
                        for m in chats]
            return rendered, await pool.encode("Bonjour [INST] 日本"), pool.info.eos_token_ids

    rendered, encoded, eos = uvloop.run(main())
    for messages, ids in zip(chats, rendered):
        assert ids == nemo.expected_chat(messages, TOOLS if len(messages) > 3 else None), messages
    assert encoded == nemo.ours.encode("Bonjour [INST] 日本") and eos == [2]


def test_a_worker_given_the_tekken_file_itself_loads_it(nemo, tmp_path):
    from tokworker.worker.server import load_tokenizer, model_fingerprint
    path = vocabulary("mistral_tekken_nemo")                     # tekken_240718.json, as mistral-common ships it
    tokenizer = load_tokenizer(str(path))
    assert tokenizer.encode("Bonjour, 日本") == nemo.ours.encode("Bonjour, 日本")
    assert tokenizer.vocab_size == 131072
    # workers on two folders that differ only in their tekken.json do not share a fingerprint
    other = _tekken_folder(tmp_path / "pixtral", "mistral_tekken")
    assert model_fingerprint(str(nemo.folder)) != model_fingerprint(str(other))


# ------------------------------------------------------------------ malformed files
@lru_cache(maxsize=1)
def _real_nemo() -> dict:
    return json.loads(vocabulary("mistral_tekken_nemo").read_text())


def _small_tekken(config=None, vocab=None, **changes) -> dict:
    """A valid tekken.json: Nemo's 256 byte tokens and 44 merges, the legacy special tokens (none listed)."""
    real = _real_nemo()
    spec = {"config": {**real["config"], "default_vocab_size": 20 + 300, "default_num_special_tokens": 20,
                       **(config or {})},
            "vocab": copy.deepcopy(real["vocab"][:300])}
    for index, entry in (vocab or {}).items():
        spec["vocab"][index] = entry
    return {**spec, **changes}


def test_a_small_tekken_file_loads_as_mistral_common(tmp_path):
    path = tmp_path / "tekken.json"
    path.write_text(json.dumps(_small_tekken()))
    ours, reference = Tokenizer.from_tekken(path), Tekkenizer.from_file(path)
    for text in CORPUS:
        assert ours.encode(text, split_special_tokens=True) == reference.encode(text, bos=False, eos=False), text
    listed = [{"rank": 0, "token_str": "<unk>", "is_control": True}, {"rank": 1, "token_str": "<s>", "is_control": True},
              {"rank": 2, "token_str": "</s>", "is_control": True}, {"rank": 3, "token_str": "[THINK]", "is_control": True}]
    path.write_text(json.dumps(_small_tekken(special_tokens=listed)))
    ours, reference = Tokenizer.from_tekken(path), Tekkenizer.from_file(path)
    assert [ours.id_to_token(i) for i in range(20)] == [reference.id_to_piece(i) for i in range(20)]
    assert ours.encode("[THINK]ok</s>", add_special_tokens=True) == [1, 3] + reference.encode("ok", bos=False, eos=True)


MALFORMED = {
    "is not valid JSON": lambda: b"{not json",
    '"config" and "vocab"': lambda: {"vocab": []},
    "config.pattern must be a string": lambda: _small_tekken(config={"pattern": 5}),
    "config.default_num_special_tokens must be an integer": lambda: _small_tekken(config={"default_num_special_tokens": "20"}),
    "default_vocab_size 5000 needs 4980 of the 300": lambda: _small_tekken(config={"default_vocab_size": 5000}),
    "vocab[7] must be {rank: 7": lambda: _small_tekken(vocab={7: {"rank": 8, "token_bytes": "Bw=="}}),
    "vocab[8] must be": lambda: _small_tekken(vocab={8: {"rank": 8, "token_bytes": "***"}}),
    "vocab[10] must be": lambda: _small_tekken(vocab={10: {"rank": 10, "token_bytes": "Cg==é"}}),
    "vocab[11] must be": lambda: _small_tekken(vocab={11: ["rank", 11]}),
    "same token_bytes twice": lambda: _small_tekken(vocab={9: {"rank": 9, "token_bytes": "Bw=="}}),
    "special_tokens[0] must be": lambda: _small_tekken(special_tokens=[{"rank": 1, "token_str": "<s>"}]),
    "special_tokens repeat a token_str": lambda: _small_tekken(
        special_tokens=[{"rank": 0, "token_str": "<s>"}, {"rank": 1, "token_str": "<s>"}]),
    "more than default_num_special_tokens 20": lambda: _small_tekken(
        special_tokens=[{"rank": i, "token_str": f"<t{i}>"} for i in range(21)]),
    "lists no special_tokens, which tokenizer version 'v11' needs": lambda: _small_tekken(config={"version": "v11"}),
}


@pytest.mark.parametrize("names", list(MALFORMED))
def test_a_malformed_tekken_file_is_a_typed_error_naming_the_part(tmp_path, names):
    content = MALFORMED[names]()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tekken.json").write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    with pytest.raises(MalformedVocabulary, match=re.escape(names)) as raised:
        Tokenizer.from_dir(folder)
    assert str(folder / "tekken.json") in str(raised.value)
