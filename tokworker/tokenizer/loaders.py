"""Vocabularies that are not tokenizer.json, assembled into the same pipeline objects.

- tiktoken rank files (`.tiktoken`, Llama 3's `tokenizer.model`): "base64-token rank" per line, with the
  split pattern and special tokens the model's own code passes to tiktoken. Ids are the ranks.
- Mistral's `tekken.json` (what mistral-common reads): tiktoken ranks shifted past the special tokens.
- GPT-2 style `vocab.json` + `merges.txt`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from functools import partial
from pathlib import Path

import msgspec
import regex

from . import decoders, pre_tokenizers, precomputed, processors, unicode
from .config import TokenizerConfig
from .errors import MalformedVocabulary
from .models.bpe import BPE

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA4_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                  r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                  r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
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


def llama4_special_tokens(first_id: int = 200000, count: int = 2048) -> dict[str, int]:
    """Llama 4: the basic tokens, the post-training ones (headers, <|eot|>, <|eom|>, python tags), the vision
    ones and the reasoning ones, each group padded with its own reserved names, then reserved ones up to `count`."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
             "<|header_start|>", "<|header_end|>", "<|eom|>", "<|eot|>", "<|step|>"]
    names += [f"<|text_post_train_reserved_special_token_{i}|>" for i in range(6)]
    names += ["<|python_start|>", "<|python_end|>", "<|finetune_right_pad|>"]
    names += [f"<|text_post_train_reserved_special_token_{i}|>" for i in range(8, 69)]
    names += ["<|image_start|>", "<|image_end|>", "<|vision_reserved_special_token_0|>",
              "<|vision_reserved_special_token_1|>", "<|tile_x_separator|>", "<|tile_y_separator|>"]
    names += [f"<|vision_reserved_special_token_{i}|>" for i in range(2, 6)]
    names += ["<|image|>", "<|vision_reserved_special_token_6|>", "<|patch|>"]
    names += [f"<|vision_reserved_special_token_{i}|>" for i in range(7, 1048)]
    names += [f"<|reasoning_reserved_special_token_{i}|>" for i in range(8)]
    names += ["<|reasoning_thinking_start|>", "<|reasoning_thinking_end|>"]
    names += [f"<|reserved_special_token_{i}|>" for i in range(count - len(names))]
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
    if add_bos and bos_token not in special_tokens:
        raise ValueError(f"add_bos needs bos_token among the special tokens, got {bos_token!r}")
    data = Path(path).read_bytes()
    config = config or TokenizerConfig(bos_token=bos_token, eos_token=eos_token, chat_template=chat_template)
    return _ranked_tokenizer(cls, read_tiktoken_ranks(path, data), precomputed.digest(data, "tiktoken"), pattern,
                             special_tokens, config, bos_token if add_bos else None)


def _ranked_tokenizer(cls, ranks: dict[bytes, int], cache_key: str, pattern: str, special_tokens: dict[str, int],
                      config: TokenizerConfig, bos_token: str | None):
    """tiktoken's pipeline (split pattern, byte-level BPE over ranks, special tokens by id); with bos_token,
    encode(..., add_special_tokens=True) puts it first."""
    model = BPE.from_ranks(ranks, pre_tokenizers.BYTE_SYMBOLS, cache_key)
    splitter = pre_tokenizers.Split(unicode.translate_pattern(pattern, "tiktoken"))
    pre_tokenizer = pre_tokenizers.Sequence([splitter, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    taken = set(ranks.values())
    for name, token_id in special_tokens.items():
        if token_id in taken:
            raise ValueError(f"special token {name!r} reuses id {token_id} of an ordinary token")
    added = [{"id": token_id, "content": name, "special": True, "normalized": False}
             for name, token_id in special_tokens.items()]
    post_processor = None
    if bos_token is not None:
        post_processor = processors.TemplateProcessing(
            [{"SpecialToken": {"id": bos_token}}, {"Sequence": {"id": "A"}}],
            {bos_token: {"ids": [special_tokens[bos_token]]}})
    return cls(model, pre_tokenizer=pre_tokenizer, post_processor=post_processor, decoder=decoders.ByteLevel(),
               added_tokens=added, config=config, keep_added_ids=True)


# The special tokens of tekken.json files that list none (written before "special_tokens" was stored, the
# layout mistral-common assumes up to tokenizer version v7); the rest up to the file's count are <SPECIAL_i>.
TEKKEN_LEGACY_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                                "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]",
                                "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]",
                                "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]")
_TEKKEN_LEGACY_UNTIL = 7


def tekken_tokenizer(cls, path, config: TokenizerConfig | None = None):
    """Mistral's tekken.json as mistral-common's Tekkenizer reads it: the first default_num_special_tokens ids
    are the special tokens, then the first default_vocab_size - that many tiktoken ranks, shifted past them.
    encode(..., add_special_tokens=True) puts <s> first (Tekkenizer.encode(bos=True)). MalformedVocabulary
    names the field of a file that is not such a layout."""
    data = Path(path).read_bytes()
    try:
        spec = msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        raise MalformedVocabulary(path, f"is not valid JSON: {error}") from None
    specials, ranks, pattern = _tekken_layout(path, spec)
    config = config or TokenizerConfig()
    defaults = {name: token for name, token in (("bos_token", "<s>"), ("eos_token", "</s>"), ("unk_token", "<unk>"),
                                                ("pad_token", "<pad>")) if getattr(config, name) is None}
    config = dataclasses.replace(config, **{name: token for name, token in defaults.items() if token in specials})
    return _ranked_tokenizer(cls, ranks, precomputed.digest(data, "tekken"), pattern, specials, config,
                             config.bos_token if config.bos_token in specials else None)


def _tekken_layout(path, spec) -> tuple[dict[str, int], dict[bytes, int], str]:
    """(special token -> id, token bytes -> id, split pattern) of a decoded tekken.json, each part checked."""
    if not isinstance(spec, dict) or not isinstance(spec.get("config"), dict) or not isinstance(spec.get("vocab"), list):
        raise MalformedVocabulary(path, 'is not a tekken file (an object with "config" and "vocab")')
    config = spec["config"]
    for name, kind in (("pattern", str), ("default_vocab_size", int), ("default_num_special_tokens", int)):
        if not isinstance(config.get(name), kind) or isinstance(config.get(name), bool):
            raise MalformedVocabulary(path, f'config.{name} must be {"a string" if kind is str else "an integer"}')
    size, count = config["default_vocab_size"], config["default_num_special_tokens"]
    listed = spec.get("special_tokens")
    if listed is None:
        version = config.get("version")
        number = regex.match(r"v(\d+)", version) if isinstance(version, str) else None
        if number is None or int(number[1]) > _TEKKEN_LEGACY_UNTIL:
            raise MalformedVocabulary(path, f"lists no special_tokens, which tokenizer version {version!r} needs")
        names = list(TEKKEN_LEGACY_SPECIAL_TOKENS)
    elif isinstance(listed, list):
        names = []
        for index, token in enumerate(listed):
            if not isinstance(token, dict) or token.get("rank") != index or not isinstance(token.get("token_str"), str):
                raise MalformedVocabulary(path, f"special_tokens[{index}] must be {{rank: {index}, token_str: ...}}")
            names.append(token["token_str"])
    else:
        raise MalformedVocabulary(path, "special_tokens must be a list")
    if len(names) > count:
        raise MalformedVocabulary(path, f"lists {len(names)} special tokens, more than default_num_special_tokens {count}")
    names += [f"<SPECIAL_{i}>" for i in range(len(names), count)]
    specials = dict(zip(names, range(count)))
    if len(specials) != count:
        raise MalformedVocabulary(path, "special_tokens repeat a token_str")
    vocab = spec["vocab"]
    if not count <= size <= count + len(vocab):
        raise MalformedVocabulary(path, f"default_vocab_size {size} needs {size - count} of the {len(vocab)} "
                                        "vocab entries after the special tokens")
    ranks = {}
    for rank, token in enumerate(vocab[:size - count]):
        try:
            token_bytes = binascii.a2b_base64(token["token_bytes"], strict_mode=True) if token["rank"] == rank else None
        except (TypeError, KeyError, ValueError):          # binascii.Error is a ValueError
            token_bytes = None
        if token_bytes is None:
            raise MalformedVocabulary(path, f"vocab[{rank}] must be {{rank: {rank}, token_bytes: <base64>}}")
        ranks[token_bytes] = rank + count
    if len(ranks) != size - count:
        raise MalformedVocabulary(path, "vocab holds the same token_bytes twice")
    return specials, ranks, config["pattern"]


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
