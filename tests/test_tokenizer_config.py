"""A model folder's config files read as transformers reads them: special tokens, templates, eos ids.
Covers tokworker.tokenizer.config."""

from __future__ import annotations

import json
import shutil

import pytest

from tests import tokenizer_refs as shared
from tests.realdata import vocabulary
from tokworker import Tokenizer


@pytest.fixture()
def qwen_dir(tmp_path):
    source = vocabulary("qwen3_dir")
    shutil.copy(source / "tokenizer.json", tmp_path / "tokenizer.json")
    shutil.copy(source / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    return tmp_path


def _edit_config(directory, **changes):
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def test_generation_config_eos_list_follows_config_eos(qwen_dir):
    (qwen_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643], "bos_token_id": 151643}))
    tok = Tokenizer.from_dir(qwen_dir)
    assert tok.eos_token_ids == [151645, 151643]
    assert tok.bos_token_id == 151643          # no bos_token in the config: generation_config's


def test_single_generation_eos_and_special_tokens_map_fallback(qwen_dir):
    _edit_config(qwen_dir, eos_token=None, bos_token=None)
    (qwen_dir / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": {"content": "<|endoftext|>", "lstrip": False}, "bos_token": "<|im_start|>"}))
    (qwen_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": 151645}))
    tok = Tokenizer.from_dir(qwen_dir)
    assert tok.eos_token == "<|endoftext|>" and tok.bos_token == "<|im_start|>"
    assert tok.eos_token_ids == [151643, 151645]
    assert tok.bos_token_id == 151644


def test_template_files_take_precedence(qwen_dir):
    (qwen_dir / "chat_template.json").write_text(json.dumps({"chat_template": "from json"}))
    assert Tokenizer.from_dir(qwen_dir).chat_template == "from json"
    (qwen_dir / "chat_template.jinja").write_text("from jinja {{ messages }}")
    assert Tokenizer.from_dir(qwen_dir).chat_template == "from jinja {{ messages }}"


def test_named_templates(qwen_dir):
    _edit_config(qwen_dir, chat_template=[{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}])
    assert Tokenizer.from_dir(qwen_dir).chat_template == {"default": "A", "tool_use": "B"}


def test_no_template_and_no_config(qwen_dir):
    (qwen_dir / "tokenizer_config.json").unlink()
    tok = Tokenizer.from_dir(qwen_dir)
    assert tok.chat_template is None and tok.eos_token_ids == [] and tok.bos_token_id is None


def test_added_tokens_decoder_adds_missing_tokens(qwen_dir):
    """transformers adds added_tokens_decoder entries that tokenizer.json lacks."""
    _edit_config(qwen_dir, added_tokens_decoder={"151669": {"content": "<|new_control|>", "special": True,
                                                            "normalized": False, "lstrip": False, "rstrip": False,
                                                            "single_word": False}})
    tok = Tokenizer.from_dir(qwen_dir)
    assert tok.token_to_id("<|new_control|>") == 151669
    assert tok.encode("a<|new_control|>b") == [64, 151669, 65]
    assert 151669 in tok.special_ids and tok.vocab_size == 151670


def test_bad_config_is_a_value_error(qwen_dir):
    (qwen_dir / "generation_config.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="generation_config.json"):
        Tokenizer.from_dir(qwen_dir)


def test_apply_chat_template_delegates_to_templates(qwen_dir):
    pytest.importorskip("tokworker.templates.apply")
    tok = shared.ours("qwen3_dir")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nhi<|im_end|>" in text
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert tok.decode(ids) == text
