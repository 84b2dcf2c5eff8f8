"""A SentencePiece .model file -> a tokenizer.json object, as transformers builds them (bench and tests).

transformers 5.24's LlamaConverter path crashes (TRAPS.md), so this reads the model protobuf through the
`sentencepiece` package's bundled `sentencepiece_model_pb2` and writes what transformers' converters
produce:
- BPE models as LlamaConverter does in legacy mode (Llama, Mistral): normalizer Prepend("▁") + Replace(" ",
  "▁"), no pre-tokenizer, BPE with byte_fallback and fuse_unk, merges from the piece scores, decoder
  Replace("▁", " ") + ByteFallback + Fuse + Strip(" ", 1, 0), and a "<s> $A" post-processor (BOS).
- Unigram models as SpmConverter does: Precompiled(charsmap) + Strip(right) + Replace(" {2,}", "▁"),
  Metaspace("▁", prepend_scheme="always") pre-tokenizer and decoder.
Control pieces become special added tokens, user-defined pieces non-special ones (both normalized=False).
"""

from __future__ import annotations

import base64
from pathlib import Path

from sentencepiece import sentencepiece_model_pb2

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6
UNIGRAM, BPE = 1, 2


def load_proto(path: str | Path) -> sentencepiece_model_pb2.ModelProto:
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(Path(path).read_bytes())
    return proto


def _added_tokens(proto, special_types: tuple[int, ...]) -> list[dict]:
    tokens = []
    for id_, piece in enumerate(proto.pieces):
        if piece.type in special_types or piece.type == USER_DEFINED:
            tokens.append({"id": id_, "content": piece.piece, "single_word": False, "lstrip": False,
                           "rstrip": False, "normalized": False, "special": piece.type != USER_DEFINED})
    return tokens


def _bpe_merges(proto) -> list[list[str]]:
    """Every split of a normal piece into two normal pieces, highest piece score first (SentencePiece merges
    the best-scoring pair); a piece's own splits ordered by the ids of their halves."""
    normal = {p.piece: (p.score, id_) for id_, p in enumerate(proto.pieces) if p.type == NORMAL}
    ranked = []
    for piece, (score, id_) in normal.items():
        for split in range(1, len(piece)):
            left, right = piece[:split], piece[split:]
            if left in normal and right in normal:
                ranked.append((-score, id_, normal[left][1], normal[right][1], left, right))
    ranked.sort()
    return [[left, right] for *_, left, right in ranked]


def _bpe_tokenizer(proto) -> dict:
    spec = proto.trainer_spec
    vocab = {p.piece: id_ for id_, p in enumerate(proto.pieces)}
    bos = spec.bos_piece if spec.bos_id >= 0 else None
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(proto, (UNKNOWN, CONTROL)),
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        ]},
        "pre_tokenizer": None,
        "post_processor": None if bos is None else {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [spec.bos_id], "tokens": [bos]}},
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": spec.unk_piece, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": bool(spec.byte_fallback),
            "ignore_merges": False, "vocab": vocab, "merges": _bpe_merges(proto),
        },
    }


def _unigram_tokenizer(proto) -> dict:
    charsmap = proto.normalizer_spec.precompiled_charsmap
    normalizers = [
        {"type": "Strip", "strip_left": False, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"},
    ]
    if charsmap:
        normalizers.insert(0, {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()})
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(proto, (CONTROL,)),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": metaspace,
        "post_processor": None,
        "decoder": metaspace,
        "model": {
            "type": "Unigram", "unk_id": proto.trainer_spec.unk_id, "byte_fallback": False,
            "vocab": [[p.piece, p.score] for p in proto.pieces],
        },
    }


def convert(path: str | Path) -> dict:
    """The tokenizer.json object for the SentencePiece model at `path`."""
    proto = load_proto(path)
    model_type = proto.trainer_spec.model_type
    if model_type == BPE:
        return _bpe_tokenizer(proto)
    if model_type == UNIGRAM:
        return _unigram_tokenizer(proto)
    raise ValueError(f"no converter for SentencePiece model type {model_type}")

