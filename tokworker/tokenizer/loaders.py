"""Vocabularies that are not tokenizer.json, assembled into the same pipeline objects.

- tiktoken rank files (`.tiktoken`, Llama 3's `tokenizer.model`): "base64-token rank" per line, with the
  split pattern and special tokens the model's own code passes to tiktoken. Ids are the ranks.
- GPT-2 style `vocab.json` + `merges.txt`.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import partial
from pathlib import Path

from . import decoders, pre_tokenizers, precomputed, processors, unicode
from .config import TokenizerConfig
from .models.bpe import BPE

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                  r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")


def qwen_special_tokens(first_id: int = 151643) -> dict[str, int]:
    """Qwen (qwen.tiktoken): <|endoftext|>, <|im_start|>, <|im_end|>, then <|extra_0|>..<|extra_204|>."""
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"<|extra_{i}|>" for i in range(205)]
    return {name: first_id + i for i, name in enumerate(names)}


def llama3_special_tokens(first_id: int = 128000, count: int = 256) -> dict[str, int]:
    """Llama 3: its named control tokens, then reserved ones up to `count` in all."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>",
             "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>"]
    names += [f"<|reserved_special_token_{2 + i}|>" for i in range(count - len(names))]
    return {name: first_id + i for i, name in enumerate(names)}


# o200k_base (GPT-4o, o1, gpt-oss's base): cased words, camelCase split, digit runs of three
O200K_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
CL100K_SPECIAL_TOKENS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                         "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


_EMPTY_TOKEN = b"="          # base64 of no bytes, as tiktoken reads it (strict base64 refuses lone padding)


def read_tiktoken_ranks(path: str | Path, data: bytes | None = None) -> dict[bytes, int]:
    """token bytes -> rank from a tiktoken file (or its bytes); ValueError names the first malformed line."""
    if data is None:
        data = Path(path).read_bytes()
    lines = data.splitlines()
    fields = data.split()
    if len(fields) == 2 * (len(lines) - lines.count(b"")):        # every line "token rank": decode in C
        tokens = fields[0::2]
        while _EMPTY_TOKEN in tokens:                                # Whisper's files hold one: "= 50256"
            tokens[tokens.index(_EMPTY_TOKEN)] = b""
        try:
            ranks = dict(zip(map(partial(binascii.a2b_base64, strict_mode=True), tokens),
                             map(int, fields[1::2])))
        except (ValueError, binascii.Error):
            ranks = None
        if ranks is not None and len(ranks) == len(fields) // 2:
            if not ranks:
                raise ValueError(f"{path} holds no tokens")
            return ranks
    ranks = {}
    for number, line in enumerate(lines, 1):                       # slow path: find the bad line
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[b"" if token == _EMPTY_TOKEN else base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise ValueError(f"{path}:{number} is not a 'base64-token rank' line") from None
    if not ranks:
        raise ValueError(f"{path} holds no tokens")
    return ranks


def tiktoken_tokenizer(cls, path, pattern: str, special_tokens: dict[str, int], *, bos_token: str | None = None,
                       eos_token: str | None = None, add_bos: bool | None = None, chat_template=None,
                       config: TokenizerConfig | None = None):
    """A Tokenizer equal to tiktoken.Encoding(pat_str=pattern, mergeable_ranks=<file>, special_tokens=...)
    encoding with allowed_special="all". With add_bos (default: whenever bos_token is given), encode(...,
    add_special_tokens=True) puts bos_token first, as Llama 3's tokenizer.json post-processor does."""
    if add_bos is None:
        add_bos = bos_token is not None
    data = Path(path).read_bytes()
    ranks = read_tiktoken_ranks(path, data)
    model = BPE.from_ranks(ranks, pre_tokenizers.BYTE_SYMBOLS, precomputed.digest(data, "tiktoken"))
    splitter = pre_tokenizers.Split(unicode.translate_pattern(pattern, "tiktoken"))
    pre_tokenizer = pre_tokenizers.Sequence([splitter, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    taken = set(ranks.values())
    for name, token_id in special_tokens.items():
        if token_id in taken:
            raise ValueError(f"special token {name!r} reuses id {token_id} of an ordinary token")
    added = [{"id": token_id, "content": name, "special": True, "normalized": False}
             for name, token_id in special_tokens.items()]
    config = config or TokenizerConfig(bos_token=bos_token, eos_token=eos_token, chat_template=chat_template)
    post_processor = None
    if add_bos:
        if bos_token not in special_tokens:
            raise ValueError(f"add_bos needs bos_token among the special tokens, got {bos_token!r}")
        post_processor = processors.TemplateProcessing(
            [{"SpecialToken": {"id": bos_token}}, {"Sequence": {"id": "A"}}],
            {bos_token: {"ids": [special_tokens[bos_token]]}})
    return cls(model, pre_tokenizer=pre_tokenizer, post_processor=post_processor, decoder=decoders.ByteLevel(),
               added_tokens=added, config=config, keep_added_ids=True)


def vocab_merges_tokenizer(cls, vocab_json, merges_txt, *, pattern: str | None = None, normalizer=None,
                           added_tokens: list[dict] | None = None, config: TokenizerConfig | None = None):
    """GPT-2 style files: byte-level BPE with the GPT-2 split, or `pattern` (a tokenizer.json Split regex, as
    Qwen's) followed by ByteLevel without its regex. `normalizer` is a Normalizer object (e.g. NFC) or None."""
    try:
        vocab = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{vocab_json} is not valid JSON: {error}") from None
    merges = []
    with open(merges_txt, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if (number == 1 and line.startswith("#version")) or not line:
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"{merges_txt}:{number} is not a 'left right' merge")
            merges.append(parts)
    model = BPE(vocab, merges)
    if pattern is None:
        pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(unicode.translate_pattern(pattern)),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return cls(model, normalizer=normalizer, pre_tokenizer=pre_tokenizer, decoder=decoders.ByteLevel(),
               added_tokens=added_tokens or [], config=config)
