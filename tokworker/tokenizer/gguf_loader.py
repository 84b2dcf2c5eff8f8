"""A GGUF file's tokenizer as the pipeline objects tokenizer.json builds, giving llama.cpp's own ids.

What llama.cpp reads (src/llama-vocab.cpp) is what is read here: `tokenizer.ggml.model` ("gpt2": byte-level
BPE over `merges`; "llama": SentencePiece-style merges by `scores`), `pre` (the split, gguf_splits),
`tokens`, `token_type`, the special ids, `add_bos_token` / `add_eos_token` / `add_space_prefix`, and
`tokenizer.chat_template` (with named templates `tokenizer.chat_template.<name>`).

Special tokens follow llama.cpp's token types, after its adjustments by token text (end-of-generation
texts such as "<|im_end|>" become CONTROL, gpt-oss's channel markers USER_DEFINED, ...). CONTROL and
UNKNOWN tokens are matched in text only when special tokens are parsed (llama-server's `parse_special`,
on for /tokenize and chats; split_special_tokens=False here); USER_DEFINED tokens always. llama.cpp takes
special tokens longest first over the whole text (AddedVocabulary's longest_first), not leftmost-longest
as `tokenizers` does; the two differ only where a token's end can start another token (DeepSeek V3's).

encode(..., add_special_tokens=True) adds bos / eos as llama.cpp's add_special does; eos_token_ids are
llama.cpp's end-of-generation ids.
"""

from __future__ import annotations

from array import array
from pathlib import Path

from . import decoders, normalizers, pre_tokenizers, precomputed, processors
from .config import TokenizerConfig
from .errors import MalformedVocabulary, UnsupportedComponent
from .gguf_reader import Unread, read_metadata
from .gguf_splits import pre_split, translate
from .models.bpe import BPE, token_splits

# llama.cpp's token attributes (bit flags), from the file's token_type codes 0-6
UNKNOWN, UNUSED, NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 2, 4, 8, 16, 32
_TYPE_ATTR = {1: NORMAL, 2: UNKNOWN, 3: CONTROL, 4: USER_DEFINED, 5: UNUSED, 6: BYTE}
_SPECIAL_IDS = ("bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "mask", "fim_pre", "fim_suf",
                "fim_mid", "fim_pad", "fim_rep", "fim_sep")
# texts llama.cpp makes end-of-generation (and CONTROL) whatever the file says
EOG_TEXTS = frozenset(("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                       "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                       "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                       "<｜end▁of▁sentence｜>", "[e~["))
# fill-in-the-middle texts it makes CONTROL when the file names no such id (pad, repo, file_sep also end
# generation); where a vocabulary holds two texts of one kind llama.cpp picks one by hash order, here both
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
_ALWAYS_TEXT = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")     # gpt-oss: USER_DEFINED
# models whose token lstrip/rstrip llama.cpp sets by name (with C's ASCII isspace): not reproduced
_STRIP_BY_NAME = ("phi-3", "phi3", "modern-bert", "jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert",
                  "nomic-bert-moe", "jina-bert-v3")
# the keys read here (and the named templates under _NAMED_TEMPLATE); the reader walks over every other value
_NAMED_TEMPLATE = "tokenizer.chat_template."
_KEYS = frozenset(("general.name", "general.architecture", "tokenizer.chat_template")
                  + tuple(f"tokenizer.ggml.{name}" for name in (
                      "model", "pre", "tokens", "token_type", "scores", "merges", "add_bos_token", "add_eos_token",
                      "add_space_prefix", "prefix_token_id", "suffix_token_id", "middle_token_id"))
                  + tuple(f"tokenizer.ggml.{name}_token_id" for name in _SPECIAL_IDS))


def gguf_tokenizer(cls, path):
    """The Tokenizer of a GGUF file (see the module docstring); MalformedVocabulary names a broken field,
    UnsupportedComponent a tokenizer kind or split llama.cpp has that is not reproduced here."""
    path = Path(path)
    meta = read_metadata(path, (_NAMED_TEMPLATE,), _KEYS, nested=False)
    fields = _Fields(path, meta)
    kind = fields.get("tokenizer.ggml.model", str)
    if kind not in ("gpt2", "llama"):
        raise UnsupportedComponent("GGUF tokenizer.ggml.model", kind, 'only "gpt2" (BPE) and "llama" (SPM) are read')
    names = (fields.get("general.name", str, "") + " " + fields.get("tokenizer.ggml.pre", str, "") + " "
             + fields.get("general.architecture", str, "")).lower()
    if any(name in names for name in _STRIP_BY_NAME):
        raise UnsupportedComponent("GGUF model", names.strip(), "llama.cpp strips spaces around its special tokens "
                                   "by model name, which is not reproduced")
    tokens = _token_texts(fields)
    vocab = dict(zip(tokens, range(len(tokens))))
    if len(vocab) != len(tokens):
        raise MalformedVocabulary(path, "tokenizer.ggml.tokens holds the same token twice (llama.cpp refuses it too)")
    attrs = _attributes(fields, len(tokens))
    ids = _special_ids(fields, kind, len(tokens))
    eog = _adjust_specials(fields, tokens, vocab, attrs, ids)
    if kind == "gpt2":
        split = pre_split(fields.get("tokenizer.ggml.pre", str, ""))
        model = _bpe_model(fields, tokens, vocab, split.ignore_merges)
        pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(translate(p)) for p in split.patterns]
                                                + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        normalizer, decoder, add_bos = None, decoders.ByteLevel(), split.add_bos
        prefix_after_special = None
    else:
        model = _spm_model(fields, tokens, vocab, ids.get("unknown"))
        pre_tokenizer, add_bos = None, True
        prefix = fields.get("tokenizer.ggml.add_space_prefix", bool, True)
        # llama.cpp gives every piece of text between special tokens its own "▁" (so does `tokenizers`)
        replace = normalizers.Replace({"String": " "}, "▁")
        normalizer = normalizers.Sequence([normalizers.Prepend("▁"), replace]) if prefix else replace
        decoder = decoders.Sequence([decoders.Replace({"String": "▁"}, " "), decoders.ByteFallback(), decoders.Fuse()]
                                    + ([decoders.Strip(" ", 1, 0)] if prefix else []))
        prefix_after_special = False
    add_bos = fields.get("tokenizer.ggml.add_bos_token", bool, add_bos) and "bos" in ids
    add_eos = fields.get("tokenizer.ggml.add_eos_token", bool, False) and "eos" in ids
    added = [{"id": i, "content": tokens[i], "special": bool(attrs[i] & (CONTROL | UNKNOWN)),
              "normalized": False} for i in range(len(tokens)) if attrs[i] & (CONTROL | USER_DEFINED | UNKNOWN)]
    text = {name: tokens[token_id] for name, token_id in ids.items()}
    config = TokenizerConfig(bos_token=text.get("bos"), eos_token=text.get("eos"), pad_token=text.get("padding"),
                             unk_token=text.get("unknown"), chat_template=_chat_template(fields),
                             generation_eos_ids=sorted(eog))
    return cls(model, normalizer=normalizer, pre_tokenizer=pre_tokenizer, decoder=decoder, added_tokens=added,
               post_processor=_bos_eos(ids, add_bos, add_eos), config=config, keep_added_ids=True,
               prefix_after_special=prefix_after_special, longest_tokens_first=True)


class _Fields:
    """Typed access to the metadata: a key of the wrong type is a MalformedVocabulary naming it."""

    def __init__(self, path: Path, meta: dict):
        self.path, self.meta = path, meta

    def get(self, key: str, kind, default=...):
        value = self.meta.get(key, default)
        if value is ...:
            raise MalformedVocabulary(self.path, f"has no {key}")
        if value is default:
            return value
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            got = value.kind if isinstance(value, Unread) else type(value).__name__
            raise MalformedVocabulary(self.path, f"{key} must be {_KIND_NAMES[kind]}, not {got}")
        if kind is list and not all(isinstance(item, str) for item in value):
            raise MalformedVocabulary(self.path, f"{key} must be an array of strings")
        return value

    def numbers(self, key: str, count: int, typecodes: str):
        values = self.meta.get(key)
        if values is None:
            return None
        if not isinstance(values, array) or values.typecode not in typecodes or len(values) < count:
            raise MalformedVocabulary(self.path, f"{key} must be an array of {count} numbers, one per token")
        return values


_KIND_NAMES = {str: "a string", int: "an integer", bool: "a bool", list: "an array of strings"}


def _token_texts(fields: _Fields) -> list[str]:
    tokens = fields.get("tokenizer.ggml.tokens", list)
    if not tokens:
        raise MalformedVocabulary(fields.path, "tokenizer.ggml.tokens is empty")
    if "" in tokens:                 # llama.cpp names an empty token by its index
        tokens = [token or f"[EMPTY_{i}]" for i, token in enumerate(tokens)]
    return tokens


def _attributes(fields: _Fields, count: int) -> list[int]:
    types = fields.numbers("tokenizer.ggml.token_type", count, "bBhHiIqQ")
    if types is None:
        return [NORMAL] * count
    get = _TYPE_ATTR.get
    return [get(code, 0) for code in types[:count]]


def _special_ids(fields: _Fields, kind: str, count: int) -> dict[str, int]:
    """llama.cpp's defaults for the tokenizer kind, replaced by the file's ids that are in range."""
    ids = {"bos": 11, "eos": 11} if kind == "gpt2" else {"bos": 1, "eos": 2, "unknown": 0}
    ids = {name: token_id for name, token_id in ids.items() if token_id < count}
    for name in _SPECIAL_IDS:
        token_id = fields.get(f"tokenizer.ggml.{name}_token_id", int, None)
        if token_id is not None and 0 <= token_id < count:
            ids[name] = token_id
    for old, new in (("prefix", "fim_pre"), ("suffix", "fim_suf"), ("middle", "fim_mid")):   # deprecated keys
        token_id = fields.get(f"tokenizer.ggml.{old}_token_id", int, None)
        if token_id is not None and 0 <= token_id < count:
            ids[new] = token_id
    return ids


def _adjust_specials(fields: _Fields, tokens: list[str], vocab: dict[str, int], attrs: list[int],
                     ids: dict[str, int]) -> set[int]:
    """llama.cpp's changes to token attributes by text; returns its end-of-generation ids."""
    eog = {ids[name] for name in ("fim_pad", "fim_rep", "fim_sep") if name in ids}
    for name, texts in FIM_TEXTS.items():
        if name not in ids:
            for token_id in _ids_of(vocab, texts):
                attrs[token_id] |= CONTROL
                if name in ("fim_pad", "fim_rep", "fim_sep"):
                    eog.add(token_id)
    for token_id in _ids_of(vocab, EOG_TEXTS):
        eog.add(token_id)
        attrs[token_id] |= CONTROL
    for token_id in _ids_of(vocab, _ALWAYS_TEXT):
        attrs[token_id] = USER_DEFINED
    eog.update(ids[name] for name in ("eos", "eot", "eom") if name in ids)
    texts = {tokens[i]: i for i in eog}
    calls = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and calls and ("<|return|>" in texts or "<|flush|>" in texts):   # harmony, solar-open
        eog.discard(texts["<|end|>"])
        attrs[texts["<|end|>"]] = USER_DEFINED
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):     # gemma 4, plamo
        eog.discard(texts["</s>"])
        attrs[texts["</s>"]] = NORMAL
    return eog


def _ids_of(vocab: dict[str, int], texts) -> list[int]:
    return [token_id for token_id in map(vocab.get, texts) if token_id is not None]


def _bpe_model(fields: _Fields, tokens: list[str], vocab: dict[str, int], ignore_merges: bool) -> BPE:
    merges = fields.get("tokenizer.ggml.merges", list)
    pairs = []
    for merge in merges:
        cut = merge.find(" ", 1)            # as llama.cpp splits them; a merge with no space can never apply
        if cut > 0:
            pairs.append((merge[:cut], merge[cut + 1:]))
    pairs = list(dict.fromkeys(pairs))      # llama.cpp keeps a pair's first rank
    source = "\n".join(tokens).encode("utf-8", "surrogatepass") + b"\0" + "\n".join(merges).encode("utf-8")
    try:
        return BPE(vocab, pairs, ignore_merges=ignore_merges, unknown_blocks=True,
                   cache_key=precomputed.digest(source, "gguf-bpe"))
    except ValueError as error:
        raise MalformedVocabulary(fields.path, f"tokenizer.ggml.merges: {error}") from None


def _spm_model(fields: _Fields, tokens: list[str], vocab: dict[str, int], unknown: int | None) -> BPE:
    """llama.cpp's SentencePiece merging: two adjacent symbols merge when their text is a token, highest
    score first: BPE whose merges are every split of every token (token_splits, in time linear in the
    tokens' length), ranked by score. Equal scores rank by id here, where llama.cpp takes the leftmost
    pair; Mistral v1/v3 share one score only among their runs of "▁", which come out as llama.cpp's either
    way (tests/test_gguf_built.py, runs of up to 40 spaces)."""
    scores = fields.numbers("tokenizer.ggml.scores", len(tokens), "fi")
    model = BPE(vocab, (), pair_table={}, byte_fallback=True,
                unk_token=tokens[unknown] if unknown is not None else None)

    def build() -> dict[int, int]:
        shift, rank_of, table = model.shift, array("q", bytes(8 * len(tokens))), {}
        # highest score first, ties by id (a stable sort keeps ids in order under reverse=True)
        order = range(len(tokens)) if scores is None else sorted(range(len(tokens)), key=scores.__getitem__,
                                                                 reverse=True)
        for rank, token_id in enumerate(order):
            rank_of[token_id] = rank
        for token_id, left, right in token_splits(tokens):
            table[left << shift | right] = rank_of[token_id] << shift | token_id
        return table

    source = "\n".join(tokens).encode("utf-8") + b"\0" + (scores.tobytes() if scores is not None else b"")
    model.cache_key = precomputed.digest(source, "gguf-spm")
    model.pairs = precomputed.pair_table(model.cache_key, build, model._consistent)
    return model


def _bos_eos(ids: dict[str, int], add_bos: bool, add_eos: bool):
    single = ([{"SpecialToken": {"id": "bos"}}] if add_bos else []) + [{"Sequence": {"id": "A"}}] \
        + ([{"SpecialToken": {"id": "eos"}}] if add_eos else [])
    if len(single) == 1:
        return None
    return processors.TemplateProcessing(single, {name: {"ids": [ids[name]]} for name in ("bos", "eos") if name in ids})


def _chat_template(fields: _Fields):
    """tokenizer.chat_template, or name -> template when the file also holds named ones (llama-server
    uses "tool_use" for requests with tools)."""
    default = fields.get("tokenizer.chat_template", str, None)
    prefix = _NAMED_TEMPLATE
    named = {key[len(prefix):]: fields.get(key, str) for key in fields.meta if key.startswith(prefix)}
    if not named:
        return default
    return ({"default": default} if default is not None else {}) | named
