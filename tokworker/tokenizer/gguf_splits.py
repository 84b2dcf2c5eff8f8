"""How llama.cpp splits text before BPE, per `tokenizer.ggml.pre` name (its src/llama-vocab.cpp).

llama.cpp runs a list of regexes in turn, each splitting every piece the previous one left, matches and
the text between them both kept (tokenizers' Split with behaviour Isolated); a few lists are hand-written
loops that match the same strings. Its character classes come from its own Unicode table, which is Unicode
15.1 with \\s the White_Space property (unicode_data/llama_cpp.zlib, see tools/probe_llama_unicode.py): not
tokenizers' Unicode, nor Python's. So the patterns below are written with \\p{L}, \\p{N}, \\p{P}, \\p{S},
\\p{M}, \\s and \\S standing for llama.cpp's classes, and translated into explicit ranges for `regex`.

A pre name whose split is not listed here raises UnsupportedComponent rather than guess.
"""

from __future__ import annotations

import functools
import json
import zlib
from dataclasses import dataclass

import regex

from .errors import UnsupportedComponent
from .unicode import bracket_body
from .unicode_data import TABLES, boundaries, charset

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
# cased words without \p{Lu}/\p{Ll}: llama.cpp has no case classes, so "a letter that is not a-z" stands for
# upper case and "a letter that is not A-Z" for lower case (a letter outside ASCII is both)
_UPPER, _LOWER = r"(?:(?=\p{L})[^a-z])", r"(?:(?=\p{L})[^A-Z])"
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
         rf"{_CONTRACTIONS}?|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK3 = (r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+",
             r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"


@dataclass(frozen=True)
class PreSplit:
    patterns: tuple[str, ...]       # applied in turn, llama.cpp's class notation
    ignore_merges: bool = False     # a word that is a token is that token
    add_bos: bool = False           # llama.cpp's default when the file has no add_bos_token


_LLAMA3 = PreSplit((LLAMA3,), ignore_merges=True, add_bos=True)
_STARCODER = PreSplit((r"\p{N}", GPT2))
_GPT2 = PreSplit((GPT2,))
_QWEN2 = PreSplit((QWEN2,))
_GPT4O = PreSplit((GPT4O,))

PRE_SPLITS: dict[str, PreSplit] = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "jina-v5-nano"), _LLAMA3),
    **dict.fromkeys(("dbrx", "smaug-bpe", "chatglm-bpe"), PreSplit((LLAMA3,))),
    **dict.fromkeys(("glm4", "glm5"), PreSplit((LLAMA3,), ignore_merges=True)),
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                     "mellum2"), _STARCODER),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                     "mellum", "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
                     "jina-v1-en", "jina-v2-code", "roberta-bpe"), _GPT2),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                     "solar-open"), _QWEN2),
    "qwen35": PreSplit((QWEN35,)),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _GPT4O),
    "tekken": PreSplit((TEKKEN,), ignore_merges=True, add_bos=True),
    **dict.fromkeys(("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), PreSplit(DEEPSEEK3)),
    **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), PreSplit((BLOOM,))),
    "viking": PreSplit((BLOOM, r"\p{N}")),
    "falcon": PreSplit((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]")),
    "default": PreSplit((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")),
}


def pre_split(name: str) -> PreSplit:
    """The split for a `tokenizer.ggml.pre` name ("" is llama.cpp's "default")."""
    split = PRE_SPLITS.get(name or "default")
    if split is None:
        raise UnsupportedComponent("GGUF tokenizer.ggml.pre", name,
                                   "its llama.cpp split is not reproduced here; known: " + ", ".join(sorted(PRE_SPLITS)))
    return split


@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, str]:
    """Class name -> `regex` bracket body: L, N, P, S, M and s (whitespace)."""
    stored = json.loads(zlib.decompress(TABLES.with_name("llama_cpp.zlib").read_bytes()))
    bodies = {name: bracket_body(boundaries(deltas)) for name, deltas in stored["classes"].items()}
    spaces = stored["whitespace"]
    bodies["s"] = "".join(charset.escape(cp) for cp in spaces)
    return bodies


_CLASS = regex.compile(r"\\p\{(L[ultmo]?|N|P|S|M)\}|\\([sS])|(\[\^?)|(\\.)|(\])")


@functools.lru_cache(maxsize=64)
def translate(pattern: str) -> str:
    """A pattern in llama.cpp's class notation -> a `regex` pattern with explicit ranges (\\S outside a set
    only; a bracket keeps its negation and gets the classes' bodies).

    >>> translate(r"\\p{N}") == "[" + _classes()["N"] + "]"
    True
    """
    classes, out, inside, last = _classes(), [], False, 0
    for match in _CLASS.finditer(pattern):
        out.append(pattern[last:match.start()])
        last = match.end()
        category, space, opening, escaped, closing = match.groups()
        if opening:
            inside = True
            out.append(opening)
        elif closing:
            inside = False
            out.append(closing)
        elif escaped:
            out.append(escaped)
        elif category or space == "s":
            body = classes[category[0] if category else "s"]
            out.append(body if inside else f"[{body}]")
        else:                                            # \S
            if inside:
                raise ValueError(f"\\S inside a set is not translated: {pattern!r}")
            out.append(f"[^{classes['s']}]")
    out.append(pattern[last:])
    return "".join(out)
