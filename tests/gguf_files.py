"""GGUF files made in the tests with the `gguf` package's writer, the way llama.cpp's convert_hf_to_gguf.py
makes them (a tokenizer only: no tensors, which llama.cpp's vocabulary-only load never reads).

- `from_hf_folder`: a tokenizer.json folder as convert's get_vocab_base + _set_vocab_gpt2 write it: every id's
  token text; added tokens CONTROL when special or when they look special ("<|...|>"), else USER_DEFINED
  with "▁" written as a space; gguf.SpecialVocab for the merges, special ids, add_bos/add_eos and template.
- `from_sentencepiece`: a SentencePiece .model as _create_vocab_sentencepiece writes it: pieces, scores and
  types from sentencepiece itself, model "llama", pre "default".
- `fingerprint`: what convert picks `tokenizer.ggml.pre` by: the sha256 of str(ids of its CHECK_TEXT).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# convert_hf_to_gguf's check text (its fingerprint of a pre-tokenizer is the sha256 of str(ids of this))
CHECK_TEXT = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ '
              '🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ '
              '------======= нещо на Български \'\'\'\'\'\'```````""""......!!!!!!?????? I\'ve been \'told he\'s there, '
              '\'RE you sure? \'M not sure I\'ll make it, \'D you like some tea? We\'Ve a\'lL')
CONTROL, USER_DEFINED = 3, 4


def looks_special(token: str) -> bool:
    """convert's does_token_look_special."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<｜") and token.endswith("｜>")) or (token.startswith("<unused") and token.endswith(">")))


def _writer(path: Path):
    import gguf
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name(path.stem)
    return writer


def _finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def from_hf_folder(folder: Path, target: Path, pre: str) -> Path:
    """A byte-level BPE tokenizer.json folder as a vocabulary-only GGUF."""
    import gguf
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(str(folder))
    vocab, added = hf.get_vocab(), hf.get_added_vocab()
    decoder = hf.added_tokens_decoder
    reverse = {token_id: token for token, token_id in vocab.items()}
    tokens, types = [], []
    for token_id in range(max(reverse) + 1):
        token = reverse.get(token_id)
        if token is None:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
        elif token in added:
            if not decoder[token_id].normalized:
                token = hf.decode(hf.encode(token, add_special_tokens=False))
            if decoder[token_id].special or looks_special(token):
                types.append(CONTROL)
            else:
                token = token.replace("\u2581", " ")
                types.append(USER_DEFINED)
            tokens.append(token)
        else:
            tokens.append(token)
            types.append(gguf.TokenType.NORMAL)
    writer = _writer(target)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(folder, load_merges=True).add_to_gguf(writer)
    _finish(writer)
    return target


def from_sentencepiece(model_file: Path, target: Path, chat_template: str | None = None) -> Path:
    """A SentencePiece .model as a vocabulary-only GGUF (model "llama"), bos <s>, eos </s>, unk <unk>."""
    import gguf
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    tokens, scores, types = [], [], []
    for token_id in range(sp.vocab_size()):
        tokens.append(sp.IdToPiece(token_id))
        scores.append(sp.GetScore(token_id))
        types.append(2 if sp.IsUnknown(token_id) else CONTROL if sp.IsControl(token_id)
                     else 5 if sp.IsUnused(token_id) else 6 if sp.IsByte(token_id) else 1)
    writer = _writer(target)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    _finish(writer)
    return target


def fingerprint(ids: list[int]) -> str:
    return hashlib.sha256(str(ids).encode()).hexdigest()
