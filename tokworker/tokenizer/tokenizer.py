"""Tokenizer: tokenizer.json as a pipeline (added tokens, normalizer, pre-tokenizer, model, post-processor,
decoder) giving exactly `tokenizers`' ids and text.

The hot path caches whole words: a byte-level word is looked up by its raw text, so a repeated word costs one
dict lookup and no byte mapping. The cache is bounded (cleared when full) and skips very long words.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path

from . import decoders, models, normalizers, pre_tokenizers, precomputed, processors
from .added_tokens import AddedVocabulary, LiteralSpans
from .config import TokenizerConfig
from .errors import UnsupportedComponent
from .parts import parts_of, run_ids
from .spec_file import read_spec

_CACHE_LIMIT = 100_000       # words
_CACHEABLE_WORD = 256        # characters; longer words are merged every time
# Whole pieces between added tokens (a chat prompt's turns): a conversation's next turn re-renders every
# earlier one, and their ids are a pure function of the piece. Pieces shorter than this cost less than a
# lookup saves; the cache is cleared when its pieces' characters and ids pass the byte bound.
_CACHEABLE_PIECE = 64        # characters
_PIECE_CACHE_BYTES = 32 << 20
_SUPPORTED_VERSIONS = ("1.0",)


class Tokenizer:
    """Encode text to ids and decode ids to text, identically to Hugging Face `tokenizers`.

    >>> from pathlib import Path
    >>> import tokworker
    >>> tok = Tokenizer.from_dir(Path(tokworker.__file__).parent / "data" / "default")   # the bundled one
    >>> tok.encode("Hello world")
    [2599, 364, 1211, 1395]
    >>> tok.decode([2599, 364, 1211, 1395])
    'Hello world'
    """

    def __init__(self, model, *, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None,
                 added_tokens: list[dict] | None = None, config: TokenizerConfig | None = None,
                 keep_added_ids: bool = False, prefix_after_special: bool | None = None,
                 longest_tokens_first: bool = False):
        """prefix_after_special: whether one space right after a special token is SentencePiece's dummy
        prefix (None: whenever the normalizer writes that prefix, see AddedVocabulary.split).
        longest_tokens_first: added tokens are matched as llama.cpp matches them (AddedVocabulary)."""
        self.model = model
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        self.post_processor = post_processor
        self.decoder = decoder
        self.config = config or TokenizerConfig()
        specs = list(added_tokens or [])
        known = {spec.get("content") for spec in specs}
        for _, spec in sorted(self.config.added_tokens_decoder.items()):
            if spec["content"] not in known:            # transformers adds these on top of tokenizer.json
                specs.append(spec)
        normalize = normalizer.normalize if normalizer is not None else None
        self._normalize = normalize
        # SentencePiece-born pipelines: the space after a special token is the dummy prefix (see
        # AddedVocabulary.split), as the models were prompted (mistral-common), not doubled as tokenizers does
        self._space_is_prefix = normalizers.is_dummy_prefix(normalizer) if prefix_after_special is None \
            else prefix_after_special
        if self._space_is_prefix and longest_tokens_first:      # llama.cpp gives no such space a meaning
            raise ValueError("prefix_after_special and longest_tokens_first cannot be combined")
        self.added = AddedVocabulary(specs, model.vocab, normalize, keep_added_ids, longest_tokens_first)
        self.added_tokens: dict[str, int] = dict(self.added.ids)
        self.special_ids: frozenset[int] = self.added.special_ids

        size = max(max(model.vocab.values(), default=-1), max(self.added.ids.values(), default=-1)) + 1
        if list(model.vocab.values()) == list(range(len(model.vocab))):     # the usual id order: in C
            self._id_to_token: list[str | None] = [*model.vocab, *[None] * (size - len(model.vocab))]
        else:
            self._id_to_token = [None] * size
            for token, token_id in model.vocab.items():
                self._id_to_token[token_id] = token
        for content, token_id in self.added.ids.items():
            # tokenizers 0.23 shows (and decodes) a normalized=True added token in its normalized form
            if normalize is not None and content in self.added.shown_normalized:
                content = normalize(content)
            self._id_to_token[token_id] = content
        self.vocab_size = len(self._id_to_token)
        # what skip_special_tokens drops: tokenizers looks the shown token up among the special contents, so a
        # special normalized=True token whose normalized form differs (Prepend: "e" shown as "▁e") is kept
        self._skipped_ids = frozenset(i for i in self.special_ids
                                      if self._id_to_token[i] in self.added.special_contents)

        self._byte_words = bool(pre_tokenizer is not None and pre_tokenizer.byte_level
                                and hasattr(model, "use_byte_alphabet")
                                and model.use_byte_alphabet(pre_tokenizers.BYTE_SYMBOLS))
        self._byte_level_words = bool(pre_tokenizer is not None and pre_tokenizer.byte_level)
        unsplit = pre_tokenizer is None or (isinstance(pre_tokenizer, pre_tokenizers.Metaspace)
                                            and not pre_tokenizer.split_words)
        self._pieces = model.independent_pieces() if unsplit and hasattr(model, "independent_pieces") else None
        # word -> ids; the cached lists are only ever read (copied into the output), never changed
        self._cache: dict[str, list[int]] = {}
        self._pieces_seen: dict[tuple[str, bool], list[int]] = {}
        self._pieces_bytes = 0
        self._word_ids = model.tokenize_byte_word if self._byte_words else self._model_word_ids
        self._token_bytes: list[bytes] | None = None
        form = decoders.bytewise_form(decoder, filter(None, self._id_to_token), getattr(model, "suffix", ""))
        self._bytes_of_token = form[0] if form else None
        self.decode_is_bytewise: bool = form is not None
        self.strip_leading_space: bool = bool(form and form[1])

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_spec(cls, spec: dict, config: TokenizerConfig | dict | None = None, *,
                  cache_key: str | None = None) -> "Tokenizer":
        """A parsed tokenizer.json; unknown component types raise UnsupportedComponent here, at load time.
        `cache_key` names the source for the precomputed-merge-table cache (from_file passes its digest)."""
        if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
            raise ValueError("a tokenizer.json object with a \"model\" is required")
        version = spec.get("version", "1.0")
        if version not in _SUPPORTED_VERSIONS:
            raise UnsupportedComponent("tokenizer.json version", version)
        if isinstance(config, dict):
            config = TokenizerConfig.from_dict(config)
        return cls(models.from_spec(spec["model"], cache_key),
                   normalizer=normalizers.from_spec(spec.get("normalizer")),
                   pre_tokenizer=pre_tokenizers.from_spec(spec.get("pre_tokenizer")),
                   post_processor=processors.from_spec(spec.get("post_processor")),
                   decoder=decoders.from_spec(spec.get("decoder")),
                   added_tokens=spec.get("added_tokens") or [], config=config)

    @classmethod
    def from_file(cls, path: str | Path, config: TokenizerConfig | dict | None = None) -> "Tokenizer":
        path = Path(path)
        data = path.read_bytes()
        with _collection_paused():
            try:
                spec = read_spec(data)
            except ValueError as error:
                raise ValueError(f"{path} is not valid JSON: {error}") from None
            return cls.from_spec(spec, config, cache_key=precomputed.digest(data, "tokenizer.json"))

    @classmethod
    def from_dir(cls, directory: str | Path) -> "Tokenizer":
        """A Hugging Face model folder: tokenizer.json plus the config files beside it; a Mistral folder with
        only tekken.json (as Mistral's own repositories ship it) is read as mistral-common reads it; a
        .gguf file, or a folder holding one and neither of those, as llama.cpp reads it."""
        directory = Path(directory)
        if directory.suffix == ".gguf" and directory.is_file():
            return cls.from_gguf(directory)
        if (directory / "tokenizer.json").is_file():
            return cls.from_file(directory / "tokenizer.json", TokenizerConfig.from_dir(directory))
        if (directory / "tekken.json").is_file():
            return cls.from_tekken(directory / "tekken.json", TokenizerConfig.from_dir(directory))
        ggufs = sorted(directory.glob("*.gguf")) if directory.is_dir() else []
        if len(ggufs) == 1:
            return cls.from_gguf(ggufs[0])
        if ggufs:
            raise ValueError(f"{directory} holds {len(ggufs)} .gguf files ({', '.join(p.name for p in ggufs)}); "
                             "give the one to read")
        raise ValueError(f"{directory} has no tokenizer.json (nor tekken.json, nor a .gguf file)")

    @classmethod
    def from_gguf(cls, path) -> "Tokenizer":
        """A GGUF file's tokenizer and chat template, with llama.cpp's ids; see gguf_loader."""
        from .gguf_loader import gguf_tokenizer
        with _collection_paused():
            return gguf_tokenizer(cls, path)

    @classmethod
    def from_tiktoken(cls, path, pattern: str, special_tokens: dict[str, int], **options) -> "Tokenizer":
        """A tiktoken rank file (.tiktoken, Llama 3's tokenizer.model); see loaders.tiktoken_tokenizer."""
        from .loaders import tiktoken_tokenizer
        with _collection_paused():
            return tiktoken_tokenizer(cls, path, pattern, special_tokens, **options)

    @classmethod
    def from_tekken(cls, path, config: TokenizerConfig | dict | None = None) -> "Tokenizer":
        """Mistral's tekken.json; see loaders.tekken_tokenizer."""
        from .loaders import tekken_tokenizer
        if isinstance(config, dict):
            config = TokenizerConfig.from_dict(config)
        with _collection_paused():
            return tekken_tokenizer(cls, path, config)

    @classmethod
    def from_vocab_merges(cls, vocab_json, merges_txt, **options) -> "Tokenizer":
        """GPT-2 style vocab.json + merges.txt; see loaders.vocab_merges_tokenizer."""
        from .loaders import vocab_merges_tokenizer
        with _collection_paused():
            return vocab_merges_tokenizer(cls, vocab_json, merges_txt, **options)

    # ------------------------------------------------------------------ encoding
    def encode(self, text: str, add_special_tokens: bool = False, split_special_tokens: bool = False) -> list[int]:
        """Text -> ids. split_special_tokens=True encodes special added tokens as ordinary text."""
        return self._encode(text, add_special_tokens, split_special_tokens, None)

    def encode_batch(self, texts, add_special_tokens: bool = False, split_special_tokens: bool = False) -> list[list[int]]:
        return [self._encode(text, add_special_tokens, split_special_tokens, None) for text in texts]

    def encode_with_literal_spans(self, text: str, spans, add_special_tokens: bool = False) -> list[int]:
        """Like encode, but no added token whose text overlaps a (start, end) span of `text` is matched
        (whitespace-only ones excepted): that text is encoded exactly as if the added token did not exist
        (caller text cannot forge control tokens). A zero-width span (p, p) forbids an added token across
        position p. Whitespace absorbed by a neighbouring token's lstrip/rstrip behaves as in encode."""
        checked = self._checked_spans(text, spans)
        return self._encode(text, add_special_tokens, False, LiteralSpans(checked) if checked else None)

    @staticmethod
    def _checked_spans(text: str, spans) -> list[tuple[int, int]]:
        checked = []
        for span in spans:
            start, end = span
            if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(text)):
                raise ValueError(f"literal span {span!r} is not a (start, end) range of the text")
            checked.append((start, end))
        return checked

    def _encode(self, text, add_special_tokens, split_special_tokens, spans: LiteralSpans | None) -> list[int]:
        _check_text(text)
        ids: list[int] = []
        for piece, token_id, at_start in self.added.split(text, self._normalize, split_special_tokens, spans,
                                                            self._space_is_prefix):
            if token_id is not None:
                ids.append(token_id)
            elif len(piece) < _CACHEABLE_PIECE:
                self._encode_normalized(piece, at_start, ids)
            else:
                ids += self._piece_ids(piece, at_start)
        if add_special_tokens and self.post_processor is not None:
            ids = self.post_processor.process(ids)
        return ids

    def _piece_ids(self, piece: str, at_start: bool) -> list[int]:
        key = (piece, at_start)
        ids = self._pieces_seen.get(key)
        if ids is None:
            ids = []
            self._encode_normalized(piece, at_start, ids)
            size = 4 * len(piece) + 8 * len(ids)
            if self._pieces_bytes + size > _PIECE_CACHE_BYTES:
                self._pieces_seen.clear()
                self._pieces_bytes = 0
            if size <= _PIECE_CACHE_BYTES:
                self._pieces_seen[key] = ids
                self._pieces_bytes += size
        return ids

    def _encode_normalized(self, text: str, at_start: bool, out: list[int]) -> None:
        self._encode_words(self._words(text, at_start), out)

    def _words(self, text: str, at_start: bool) -> list[str]:
        """The model's units of one normalized piece: where the pre-tokenizer (and independent_pieces) cut."""
        words = self.pre_tokenizer.split([text], at_start) if self.pre_tokenizer is not None else [text]
        if self._pieces is not None:
            words = [piece for word in words for piece in self._pieces(word)]
        return words

    def _encode_words(self, words, out: list[int]) -> None:
        cache, word_ids = self._cache, self._word_ids
        get = cache.get
        for word in words:
            ids = get(word)
            if ids is None:
                ids = word_ids(word)
                if len(word) <= _CACHEABLE_WORD:
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    cache[word] = ids
            out += ids

    # ------------------------------------------------------------------ encoding in parts (parts.py)
    def encode_parts(self, text: str, parts: int, spans=None, split_special_tokens: bool = False) -> list[list]:
        """`text` cut into at most `parts` runs for other workers to encode apart (encode_run), whose ids
        joined are exactly encode(text) (encode_with_literal_spans(text, spans) with `spans`); see parts.py.

        >>> from pathlib import Path
        >>> import tokworker
        >>> tok = Tokenizer.from_dir(Path(tokworker.__file__).parent / "data" / "default")
        >>> runs = tok.encode_parts("Hello world, hello again", 2)
        >>> runs
        [['Hello', ' world', ','], [' hello', ' again']]
        >>> [i for run in runs for i in tok.encode_run(run)] == tok.encode("Hello world, hello again")
        True
        """
        _check_text(text)
        return parts_of(self, text, parts, spans, split_special_tokens)

    def encode_run(self, run) -> list[int]:
        """The ids of one run of encode_parts."""
        return run_ids(self, run)

    def _model_word_ids(self, word: str) -> list[int]:
        if self._byte_level_words:
            word = pre_tokenizers.to_byte_symbols(word)
        return self.model.tokenize(word)

    # ------------------------------------------------------------------ decoding
    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Ids -> text, identical to `tokenizers`' decode. ValueError names an id out of range."""
        if self.decode_is_bytewise and type(self.decoder) is decoders.ByteLevel:
            return b"".join(self._bytes_for(ids, skip_special_tokens)).decode("utf-8", errors="replace")
        table, special, size = self._id_to_token, self._skipped_ids, self.vocab_size
        tokens = []
        for token_id in ids:
            _check_id(token_id, size)
            token = table[token_id]
            if token is None or (skip_special_tokens and token_id in special):
                continue
            tokens.append(token)
        return decoders.decode_tokens(self.decoder, tokens)

    def _bytes_for(self, ids, skip_special_tokens: bool) -> list[bytes]:
        table, special, size = self._all_token_bytes(), self._skipped_ids, self.vocab_size
        out = []
        for token_id in ids:
            _check_id(token_id, size)
            if not (skip_special_tokens and token_id in special):
                out.append(table[token_id])
        return out

    def _all_token_bytes(self) -> list[bytes]:
        if self._token_bytes is None:
            convert = self._bytes_of_token
            self._token_bytes = [b"" if token is None else convert(token) for token in self._id_to_token]
        return self._token_bytes

    def token_bytes(self, token_id: int, skip_special_tokens: bool = False) -> bytes:
        """The bytes one token contributes to the decoded text (only when `decode_is_bytewise`).

        Special tokens give their content's UTF-8, or b"" when skip_special_tokens=True (as decode skips
        them). Ids with no token give b"". With `strip_leading_space`, decode drops one leading space of the
        joined text; a stream must do the same once, at its start."""
        if not self.decode_is_bytewise:
            raise ValueError("this tokenizer's decoder is not bytewise; decode windows of ids instead")
        _check_id(token_id, self.vocab_size)
        if skip_special_tokens and token_id in self._skipped_ids:
            return b""
        return self._all_token_bytes()[token_id]

    def vocab_bytes(self) -> list[bytes]:
        """Bytes per id (what constrained decoding walks); b"" for special tokens and ids with no token."""
        if self.decode_is_bytewise:
            table = list(self._all_token_bytes())
        else:
            table = [b"" if token is None else self.decode([i]).encode("utf-8")
                     for i, token in enumerate(self._id_to_token)]
        for token_id in self.special_ids:
            table[token_id] = b""
        return table

    # ------------------------------------------------------------------ vocabulary
    def token_to_id(self, token: str) -> int | None:
        token_id = self.added.ids.get(token)
        return token_id if token_id is not None else self.model.vocab.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        if isinstance(token_id, int) and 0 <= token_id < self.vocab_size:
            return self._id_to_token[token_id]
        return None

    @property
    def bos_token(self) -> str | None:
        return self.config.bos_token

    @property
    def eos_token(self) -> str | None:
        return self.config.eos_token

    @property
    def bos_token_id(self) -> int | None:
        if self.config.bos_token is not None:
            token_id = self.token_to_id(self.config.bos_token)
            if token_id is not None:
                return token_id
        return self.config.generation_bos_id

    @property
    def eos_token_ids(self) -> list[int]:
        """The config's eos token first, then generation_config's eos ids, without repeats."""
        ids = []
        if self.config.eos_token is not None:
            token_id = self.token_to_id(self.config.eos_token)
            if token_id is not None:
                ids.append(token_id)
        ids.extend(i for i in self.config.generation_eos_ids if i not in ids)
        return ids

    @property
    def chat_template(self):
        return self.config.chat_template


@contextmanager
def _collection_paused():
    """A load allocates a few hundred thousand objects and no cycles: the cyclic collector, left on, would
    walk the growing heap again and again (a fifth to a third of a load's time) for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_text(text) -> None:
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"text has a lone surrogate {text[error.start]!r} at index {error.start}; "
                             "it is not valid Unicode text") from None


def _check_id(token_id, size: int) -> None:
    if type(token_id) is not int or not 0 <= token_id < size:
        if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < size:
            raise ValueError(f"token id {token_id!r} is not in the vocabulary (0 <= id < {size})")
