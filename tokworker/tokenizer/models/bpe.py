"""Byte-pair encoding on integer symbol ids, exactly as `tokenizers` merges.

Everything is precomputed once per vocabulary: a table from a pair of adjacent symbol ids, packed into one
int, to one int that packs (merge rank, merged id), and the symbol id of every byte for byte-level words.
A word then merges lowest rank first (leftmost on ties, as `tokenizers`' heap does). Short words use a list
of pair values scanned with `min` in C; long ones (a minified file, a document with no pre-tokenizer split)
take merges by value from a heap of values over a linked list of symbols, so merging stays near-linear.

The same table reproduces tiktoken when every valid split (left, right) of a token is listed as a merge
ranked by the token's rank (`from_ranks`). Byte-level words with non-ASCII characters may start from whole
characters where that provably changes nothing (bpe_chars); SentencePiece words are cut where no merge can
cross (`independent_pieces`). The table itself is cached on disk per source file (precomputed).
"""

from __future__ import annotations

from array import array
from codecs import charmap_decode
from heapq import heapify, heappop, heappush
from itertools import compress, islice, repeat
from operator import itemgetter, lshift, or_
from typing import Iterator, Union

import msgspec
import regex

from .. import precomputed
from .bpe_chars import CharSymbols

_LONG_WORD = 48           # symbols above which the heap merge beats rescanning a list


class BPE:
    """A BPE model: `vocab` (token -> id), `tokenize(word) -> ids`, and a fast `tokenize_byte_word` for byte-level
    words. It keeps no per-word cache: the Tokenizer caches whole words in front of every model."""

    def __init__(self, vocab: dict[str, int], merges, *, unk_token=None, continuing_subword_prefix=None,
                 end_of_word_suffix=None, fuse_unk=False, byte_fallback=False, ignore_merges=False,
                 pair_table: dict[int, int] | None = None, cache_key: str | None = None, unknown_blocks: bool = False):
        """`cache_key` (the source file's digest) lets the merge table come from precomputed's disk cache.
        `unknown_blocks`: a character with no token (nor byte fallback, nor unk) stays a symbol that nothing
        merges with and is dropped afterwards, as llama.cpp does; `tokenizers` drops it before merging."""
        self.vocab = vocab
        self.unk_token = unk_token
        self.prefix = continuing_subword_prefix or ""
        self.suffix = end_of_word_suffix or ""
        self.fuse_unk = fuse_unk
        self.byte_fallback = byte_fallback
        self.ignore_merges = ignore_merges
        self.unknown_blocks = unknown_blocks
        size = max(vocab.values(), default=0) + 1
        self.shift = max(size.bit_length(), 1)
        self.id_mask = (1 << self.shift) - 1
        self.cache_key = cache_key
        if pair_table is None:
            build = lambda: self._pair_table(merges)                      # noqa: E731
            pair_table = precomputed.pair_table(cache_key, build, self._consistent) if cache_key else build()
        self.pairs = pair_table
        self.byte_ids = None        # byte value -> id of its byte-level symbol (see use_byte_alphabet)
        self._missing_bytes = b""
        self._latin1_to_symbols = None   # str.translate table: chr(byte) -> byte-level symbol

    @classmethod
    def from_spec(cls, spec: dict, cache_key: str | None = None) -> "BPE":
        merges = spec.get("merges") or []          # a list, or msgspec.Raw still to decode (see _pair_table)
        return cls(dict(spec["vocab"]), merges, cache_key=cache_key, unk_token=spec.get("unk_token"),
                   continuing_subword_prefix=spec.get("continuing_subword_prefix"),
                   end_of_word_suffix=spec.get("end_of_word_suffix"), fuse_unk=bool(spec.get("fuse_unk")),
                   byte_fallback=bool(spec.get("byte_fallback")), ignore_merges=bool(spec.get("ignore_merges")))

    @classmethod
    def from_ranks(cls, ranks: dict[bytes, int], byte_symbols: list[str], cache_key: str | None = None) -> "BPE":
        """tiktoken's BPE from its token ranks: every split of a token into two tokens is a merge ranked
        by the token's rank (replaying merges to keep one split per token does not reproduce tiktoken),
        and a word that is itself a token is that token (ignore_merges), as tiktoken encodes it."""
        table = "".join(byte_symbols)
        vocab = dict(zip(map(itemgetter(0), map(charmap_decode, ranks, repeat("strict"), repeat(table))),
                         ranks.values()))
        if len(vocab) != len(ranks):
            raise ValueError("tiktoken ranks map two tokens to the same rank")
        model = cls(vocab, (), ignore_merges=True)
        model.cache_key = cache_key
        build = lambda: model._split_table(ranks)                         # noqa: E731
        model.pairs = precomputed.pair_table(cache_key, build, model._consistent) if cache_key else build()
        return model

    def _split_table(self, ranks: dict[bytes, int]) -> dict[int, int]:
        shift, table, ids = self.shift, {}, list(ranks.values())
        for token, left, right in token_splits(list(ranks)):
            rank = ids[token]
            table[ids[left] << shift | ids[right]] = rank << shift | rank
        return table

    def _consistent(self, table: dict[int, int]) -> bool:
        """A spot check of a cached table against this vocabulary: each sampled merge's parts spell its result."""
        shift, mask, prefix_len = self.shift, self.id_mask, len(self.prefix)
        sample = list(islice(table.items(), 0, None, max(len(table) // 64, 1)))
        wanted = {part for key, value in sample for part in (key >> shift, key & mask, value & mask)}
        found = list(map(wanted.__contains__, self.vocab.values()))          # C-level, not a reverse map
        tokens = dict(zip(compress(self.vocab.values(), found), compress(self.vocab, found)))
        for key, value in sample:
            left, right, merged = tokens.get(key >> shift), tokens.get(key & mask), tokens.get(value & mask)
            if left is None or right is None or merged != left + right[prefix_len:]:
                return False
        return True

    def _pair_table(self, merges) -> dict[int, int]:
        """Packed (left id, right id) -> (rank, merged id), built with C-level maps. `merges` may still be
        encoded JSON (msgspec.Raw, as Tokenizer.from_file leaves it)."""
        if isinstance(merges, msgspec.Raw):
            try:
                merges = msgspec.json.decode(merges, type=list[Union[tuple[str, str], str]])
            except msgspec.ValidationError as error:
                raise ValueError(f"a BPE merge is not a (left, right) pair: {error}") from None
        if not merges:
            return {}
        if isinstance(merges[0], str):                        # the older "left right" string form
            merges = list(map(str.split, merges, repeat(" "), repeat(1)))
        if set(map(len, merges)) != {2}:
            raise ValueError("a BPE merge is not a (left, right) pair")
        vocab, shift, prefix_len = self.vocab, self.shift, len(self.prefix)
        lefts, rights = list(map(itemgetter(0), merges)), list(map(itemgetter(1), merges))
        merged = map(str.__add__, lefts, map(itemgetter(slice(prefix_len, None)), rights)) if prefix_len \
            else map(str.__add__, lefts, rights)
        try:
            left_ids = list(map(vocab.__getitem__, lefts))
            right_ids = list(map(vocab.__getitem__, rights))
            merged_ids = list(map(vocab.__getitem__, merged))
        except KeyError as missing:
            raise ValueError(f"a BPE merge uses {missing.args[0]!r}, which is not in the vocabulary") from None
        keys = map(or_, map(lshift, left_ids, repeat(shift)), right_ids)
        values = map(or_, map(lshift, range(len(merges)), repeat(shift)), merged_ids)
        return dict(zip(keys, values))

    def independent_pieces(self, marker: str = "▁"):
        """A findall cutting a word before each run of `marker` that follows another character, or None.

        Exact when no token has `marker` after a different character: no merge can then cross such a cut,
        so the pieces merge independently (and can be cached). SentencePiece vocabularies qualify, and
        without it a Mistral document, which no pre-tokenizer splits, is one BPE word."""
        if self.prefix or self.suffix or marker not in self.vocab:
            return None
        if any(marker in token.lstrip(marker) for token in self.vocab):
            return None
        marker = regex.escape(marker)
        return regex.compile(f"{marker}*[^{marker}]+|{marker}+").findall

    def use_byte_alphabet(self, byte_symbols: list[str]) -> bool:
        """Enable `tokenize_byte_word` when every byte's symbol is in the vocabulary (byte-level BPE), or
        with unknown_blocks, where a missing byte is the symbol -1 that nothing merges with."""
        vocab = self.vocab
        if self.prefix or self.suffix or not (self.unknown_blocks or all(symbol in vocab for symbol in byte_symbols)):
            return False
        self.byte_ids = [vocab.get(symbol, -1) for symbol in byte_symbols]
        self._missing_bytes = bytes(byte for byte, token_id in enumerate(self.byte_ids) if token_id < 0)
        self._latin1_to_symbols = {byte: symbol for byte, symbol in enumerate(byte_symbols)}
        self._chars = CharSymbols(self, byte_symbols)
        return True

    # ------------------------------------------------------------------ tokenizing
    def tokenize(self, word: str) -> list[int]:
        """Ids of one pre-tokenized word written in the model's alphabet."""
        if not word:
            return []
        if self.ignore_merges:
            whole = self.vocab.get(word)
            if whole is not None:
                return [whole]
        symbols = self._initial_symbols(word)
        if self.unknown_blocks and -1 in symbols:          # -1 pairs with nothing (every table key is >= 0)
            return [symbol for symbol in self.merge(symbols) if symbol >= 0]
        return self.merge(symbols)

    def tokenize_byte_word(self, word: str) -> list[int]:
        """Ids of a byte-level word given as raw text (`use_byte_alphabet` must have succeeded). Non-ASCII
        characters may start as whole tokens when that provably changes nothing (see bpe_chars)."""
        data = word.encode("utf-8")
        if self.ignore_merges:
            whole = self.vocab.get(data.decode("latin-1").translate(self._latin1_to_symbols))
            if whole is not None:
                return [whole]
        if len(data) == len(word):
            byte_ids = self.byte_ids
            ids = self.merge([byte_ids[b] for b in data])
        else:
            ids = self.merge(self._chars.symbols(word))
        missing = self._missing_bytes
        if missing and len(data.translate(None, missing)) != len(data):
            return [token_id for token_id in ids if token_id >= 0]
        return ids

    def _initial_symbols(self, word: str) -> list[int]:
        """Characters to ids the way `tokenizers` does: prefix/suffix, then byte fallback, then (fused) unk.
        A character with none of those is dropped, as `tokenizers` drops it."""
        vocab, prefix, suffix = self.vocab, self.prefix, self.suffix
        if not prefix and not suffix:
            symbols = list(map(vocab.get, word))
            if None not in symbols:
                return symbols                 # every character is a token: the common case, in C
        symbols = []
        pending_unk = None       # (id, fused) held back exactly like tokenizers' `unk`
        last = len(word) - 1
        for index, char in enumerate(word):
            piece = char
            if index and prefix:
                piece = prefix + piece
            if index == last and suffix:
                piece = piece + suffix
            token_id = vocab.get(piece)
            if token_id is not None:
                if pending_unk is not None:
                    symbols.append(pending_unk)
                    pending_unk = None
                symbols.append(token_id)
                continue
            if self.byte_fallback:
                fallback = [vocab.get(f"<0x{b:02X}>") for b in piece.encode("utf-8")]
                if None not in fallback:
                    symbols.extend(fallback)
                    continue
            if self.unk_token is not None:
                unk_id = vocab.get(self.unk_token)
                if unk_id is None:
                    raise ValueError(f"unk_token {self.unk_token!r} is not in the vocabulary")
                if pending_unk is not None and not self.fuse_unk:
                    symbols.append(pending_unk)
                pending_unk = unk_id
            elif self.unknown_blocks:
                symbols.append(-1)
        if pending_unk is not None:
            symbols.append(pending_unk)
        return symbols

    def merge(self, symbols: list[int]) -> list[int]:
        """Apply merges to a list of symbol ids, lowest rank first, leftmost on ties."""
        if len(symbols) < 2:
            return symbols
        if len(symbols) > _LONG_WORD:
            return self._merge_long(symbols)
        get, shift, mask = self.pairs.get, self.shift, self.id_mask
        none = 1 << 62
        values = [get(left << shift | right, none) for left, right in zip(symbols, symbols[1:])]
        best = min(values)
        while best != none:
            i = values.index(best)
            merged = best & mask
            symbols[i] = merged
            del symbols[i + 1]
            del values[i]
            if i:
                values[i - 1] = get(symbols[i - 1] << shift | merged, none)
                if i < len(values):
                    values[i] = get(merged << shift | symbols[i + 1], none)
            elif values:
                values[0] = get(merged << shift | symbols[1], none)
            else:
                break
            best = min(values)
        return symbols

    def _merge_long(self, symbols: list[int]) -> list[int]:
        """Merges grouped by value (rank and merged id) over a doubly linked list of symbols: near-linear on
        any word length (a 50,000-character word, a document with no pre-tokenizer split).

        The positions of one value are merged left to right, as a heap keyed by (value, position) would. A
        merge cannot create another pair of the same value (its result would have to contain itself), so a
        value's positions are all known when it is taken; a merge that creates a pair of lower value (tiktoken
        tables allow it) suspends the current value until that pair is done."""
        get, shift, mask = self.pairs.get, self.shift, self.id_mask
        n = len(symbols)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        buckets: dict[int, list[int]] = {}
        for i in range(n - 1):
            value = get(symbols[i] << shift | symbols[i + 1])
            if value is not None:
                bucket = buckets.get(value)
                if bucket is None:
                    buckets[value] = [i]
                else:
                    bucket.append(i)
        heap = list(buckets)
        heapify(heap)
        while heap:
            value = heappop(heap)
            positions = buckets.pop(value)
            positions.sort()
            merged = value & mask
            for index, i in enumerate(positions):
                j = nxt[i]
                if j < 0 or symbols[i] < 0 or get(symbols[i] << shift | symbols[j]) != value:
                    continue                  # stale: a neighbour merged since this position was recorded
                symbols[i] = merged
                symbols[j] = -1
                k = nxt[j]
                nxt[i] = k
                lowest = value
                if k >= 0:
                    prv[k] = i
                    new = get(merged << shift | symbols[k])
                    if new is not None:
                        bucket = buckets.get(new)
                        if bucket is None:
                            buckets[new] = [i]
                            heappush(heap, new)
                        else:
                            bucket.append(i)
                        lowest = min(lowest, new)
                h = prv[i]
                if h >= 0:
                    new = get(symbols[h] << shift | merged)
                    if new is not None:
                        bucket = buckets.get(new)
                        if bucket is None:
                            buckets[new] = [h]
                            heappush(heap, new)
                        else:
                            bucket.append(h)
                        lowest = min(lowest, new)
                if lowest < value:
                    rest = positions[index + 1:]
                    if rest:
                        buckets[value] = rest
                        heappush(heap, value)
                    break
        return [s for s in symbols if s >= 0]


def token_splits(tokens: list) -> Iterator[tuple[int, int, int]]:
    """(whole, left, right) indexes into `tokens` (distinct str or bytes) for every way of cutting a token
    into two tokens, in time linear in the tokens' length (after a sort): the tokens that are a token's
    prefixes are found as a chain of longest proper prefixes, its suffixes likewise on the reversed tokens,
    and a cut is where a prefix and a suffix meet. Slicing every token at every cut instead costs the square
    of its length: 12 s of CPU for one 300,000-character token.

    >>> sorted(token_splits(["a", "b", "ab", "abb", "bb"]))
    [(2, 0, 1), (3, 0, 4), (3, 2, 1), (4, 1, 1)]
    """
    lengths = list(map(len, tokens))
    prefix = _longest_proper_prefixes(tokens)
    suffix = _longest_proper_prefixes([token[::-1] for token in tokens])
    for whole, (first, last) in enumerate(zip(prefix, suffix)):
        if first < 0 or last < 0:
            continue
        length = lengths[whole]
        right_at = {}                        # cut -> the suffix token starting there
        while last >= 0:
            right_at[length - lengths[last]] = last
            last = suffix[last]
        while first >= 0:
            right = right_at.get(lengths[first])
            if right is not None:
                yield whole, first, right
            first = prefix[first]


def _longest_proper_prefixes(tokens: list) -> array:
    """For each token the index of its longest proper prefix among `tokens` (-1: none; an empty token counts
    as none). In sorted order a token's prefixes come before it and every token between a prefix and it
    starts with that prefix, so a stack of nested prefixes holds them all when the token is reached; each
    token is pushed and popped once, each test reads at most the popped (or the next) token's length."""
    longest = array("i", [-1]) * len(tokens)           # 4 bytes a token, not an int object each
    stack: list[int] = []
    for index in sorted(range(len(tokens)), key=tokens.__getitem__):
        token = tokens[index]
        if not token:
            continue
        while stack and not token.startswith(tokens[stack[-1]]):
            stack.pop()
        if stack:
            longest[index] = stack[-1]
        stack.append(index)
    return longest
