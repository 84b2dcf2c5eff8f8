"""The SmolLM2 GGUF read by tokworker gives llama.cpp's ids: compared with llama-server itself on the same
file (/tokenize with and without parse_special, /detokenize, /apply-template), on a corpus of every kind of
text and on hypothesis strings; its chat template renders as transformers renders it; and a worker serves
the file (or a folder holding it) as its model.

One llama-server per module (the smollm2_server fixture); texts go to /tokenize in batches, as one array
of strings and separator ids, which llama-server tokenizes string by string."""

from __future__ import annotations

import asyncio
import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chat_corpus import scenarios
from tests.llama_cpp import smollm2
from tests.test_templates_parity import _template_kwargs, oracle  # noqa: F401  (oracle is a fixture)
from tests.tokenizer_corpus import CORPUS
from tokworker import Tokenizer
from tokworker.templates import TemplateError

pytestmark = pytest.mark.slow  # llama-server

SEPARATOR = 16            # <empty_output>: a CONTROL token no text below holds
# beyond the shared corpus: what llama.cpp's own classes decide (Unicode 15.1 letters and CJK extension I,
# which tokenizers' and Python 3.11's tables leave unassigned; White_Space without U+001C-U+001F), digit
# runs (SmolLM2 splits every digit), special-token text and its fragments, whitespace runs of every kind
GGUF_TEXTS = [
    "x\U0001123fy \U0002ebf0\U0002ee5d \U00011f50 \u0cf3 \U0001e030", "a\x1cb\x1d \x1e\x1f", "\u00a0\u2028\u2029\u3000x",
    "123456789 3.14159 1,000,000 ٣٤٥ ⅷ ½", "<|im_start|><|im_end|><|endoftext|><jupyter_code>", "<|im_start <|im_end| |>",
    "\n\n \n  \t\t  \r\n\r\n    x", " " * 17 + "y", "\u3000\u3000日本", "'s'S 'RE 'll", "<|im_end|>\n<|im_start|>assistant\n",
]
TEXTS = CORPUS + GGUF_TEXTS
FRAGMENTS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "start|>", "<", "|>", " ", "  ", "\n", "\t",
             "'s", "'LL", "12", "٣", "\u00a0", "\x1c", "\u2028", "é", "日本", "🦙", "\U0001123f", "\U0002ebf0"]
text_pieces = st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=12), st.sampled_from(FRAGMENTS))
texts = st.lists(text_pieces, max_size=8).map("".join)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_dir(smollm2())


def server_ids(server, batch: list[str], parse_special: bool = True) -> list[list[int]]:
    content = []
    for text in batch:
        assert "<empty_output>" not in text
        content += [text, SEPARATOR]
    ids = server.post("/tokenize", {"content": content, "parse_special": parse_special})["tokens"]
    out, current = [], []
    for token_id in ids:
        if token_id == SEPARATOR:
            out.append(current)
            current = []
        else:
            current.append(token_id)
    assert len(out) == len(batch)
    return out


@pytest.mark.parametrize("parse_special", [True, False])
def test_corpus_ids_equal_llama_server(smollm2_server, tok, parse_special):
    expected = server_ids(smollm2_server, TEXTS, parse_special)
    ours = [tok.encode(text, split_special_tokens=not parse_special) for text in TEXTS]
    assert {text: ids for text, ids in zip(TEXTS, ours) if ids != expected[TEXTS.index(text)]} == {}
    assert ours == expected


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(texts, min_size=1, max_size=16), parse_special=st.booleans())
def test_hypothesis_ids_equal_llama_server(smollm2_server, tok, batch, parse_special):
    batch = [text.replace("<empty_output>", "") for text in batch]
    expected = server_ids(smollm2_server, batch, parse_special)
    assert [tok.encode(text, split_special_tokens=not parse_special) for text in batch] == expected


def test_add_special_and_decode_equal_llama_server(smollm2_server, tok):
    """SmolLM2's file says add_bos_token false: add_special adds nothing, in both; decode equals
    /detokenize (special tokens written out)."""
    for text in TEXTS:
        ids = smollm2_server.tokenize(text, add_special=True)
        assert tok.encode(text, add_special_tokens=True) == ids
        assert tok.decode(ids) == smollm2_server.post("/detokenize", {"tokens": ids})["content"]


def test_special_tokens_are_llama_cpps(smollm2_server, tok):
    """bos/eos as the file names them; the end-of-generation ids are llama.cpp's: eos <|im_end|> and the
    texts it stops on (<|endoftext|>, and <reponame> as its fill-in-the-middle repository token)."""
    props = smollm2_server.post("/apply-template", {"messages": [{"role": "user", "content": "x"}]})
    assert props["prompt"].startswith("<|im_start|>system\n")
    assert (tok.bos_token, tok.eos_token, tok.bos_token_id) == ("<|im_start|>", "<|im_end|>", 1)
    assert tok.eos_token_ids == [2, 0, 4]
    assert sorted(tok.special_ids) == list(range(17))          # the file's 17 CONTROL tokens


def test_template_renders_as_transformers(tok, oracle):  # noqa: F811
    entry = {"text": tok.chat_template, "bos_token": tok.bos_token, "eos_token": tok.eos_token}
    rendered = 0
    for name, messages, kwargs in scenarios():
        kwargs = {"add_generation_prompt": True, **_template_kwargs(entry, kwargs)}
        try:
            expected = oracle(entry, copy.deepcopy(messages), **copy.deepcopy(kwargs))
        except Exception:  # transformers refused this input: so must we
            with pytest.raises(TemplateError):
                tok.apply_chat_template(messages, tokenize=False, **kwargs)
            continue
        assert tok.apply_chat_template(messages, tokenize=False, **kwargs) == expected, name
        rendered += 1
    assert rendered > 10


CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|> there"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Count: 1 2 3, ٣ 日本 🦙"}],
]


@pytest.mark.parametrize("messages", CHATS)
def test_chat_prompt_ids_equal_llama_servers(smollm2_server, tok, messages):
    """The prompt llama-server renders with this template, tokenized as its chat path tokenizes it (with
    parse_special and add_special), equals ours; content holding "<|im_end|>" included, which llama-server
    reads as the control token and tokworker as text (its control tokens cannot be forged)."""
    prompt = smollm2_server.post("/apply-template", {"messages": messages})["prompt"]
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == prompt
    expected = smollm2_server.tokenize(prompt, add_special=True)
    ours = tok.apply_chat_template(messages, add_generation_prompt=True)
    forged = sum("<|im_end|>" in message["content"] for message in messages)
    if not forged:
        assert ours == expected
    else:
        assert ours.count(2) == expected.count(2) - forged
        assert tok.decode(ours) == tok.decode(expected)


def test_worker_serves_the_gguf(tmp_path):
    """--model-dir takes the .gguf file, or a folder holding it and no tokenizer.json."""
    from tokworker.frontend import TokenizerPool
    model = smollm2()
    folder = tmp_path / "smollm2"
    folder.mkdir()
    (folder / model.name).symlink_to(model)
    tok = Tokenizer.from_dir(folder)
    messages = [{"role": "user", "content": "Say hi"}]

    async def main():
        for model_dir in (model, folder):
            pool = await TokenizerPool.spawn(model_dir, workers=1)
            try:
                assert (await pool.render(messages)).ids == tok.apply_chat_template(messages, add_generation_prompt=True)
                assert await pool.encode("Hello 123") == tok.encode("Hello 123")
            finally:
                await pool.close()
    asyncio.run(main())
