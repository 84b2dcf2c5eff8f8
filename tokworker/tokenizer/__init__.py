"""Exact tokenizers: tokenizer.json, tiktoken rank files, Mistral's tekken.json and vocab.json + merges.txt,
as one pipeline."""

from .errors import UnsupportedComponent
from .tokenizer import Tokenizer

__all__ = ["Tokenizer", "UnsupportedComponent"]
