"""Regenerate tokworker/data/default: the small tokenizer that `tokworker demo` runs on.

A 4,096-token byte-level BPE in Qwen's style (NFC, Qwen's split regex, ChatML control tokens, <think> and
<tool_call> as non-special added tokens, the ChatML template), trained with Hugging Face `tokenizers` on the docstrings of
Python's standard library. `tokenizers` is a dev-time tool here; the package only reads the JSON.

    python tools/make_default_tokenizer.py
"""

import inspect
import json
import importlib
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tokworker.templates.chatml import CHATML_TEMPLATE

OUT = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]


MODULES = ["argparse", "asyncio", "base64", "bisect", "calendar", "collections", "concurrent.futures",
           "contextlib", "csv", "dataclasses", "datetime", "decimal", "difflib", "email", "enum",
           "fractions", "functools", "heapq", "http.client", "inspect", "ipaddress", "itertools", "json",
           "logging", "math", "os", "pathlib", "pickletools", "random", "re", "shutil", "socket",
           "statistics", "string", "subprocess", "textwrap", "threading", "typing", "unittest", "urllib.parse",
           "uuid", "zipfile"]


def corpus():
    """Docstrings of a fixed list of standard-library modules, so the result is reproducible."""
    for name in MODULES:
        module = importlib.import_module(name)
        yield inspect.getdoc(module) or ""
        for _, member in inspect.getmembers(module):
            doc = inspect.getdoc(member)
            if doc:
                yield doc


def main():
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer)
    tokenizer.add_tokens(ADDED)
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    # ChatML is this tokenizer's own format (its control tokens), so it ships as the model's template
    (OUT / "chat_template.jinja").write_text(CHATML_TEMPLATE)


if __name__ == "__main__":
    main()
