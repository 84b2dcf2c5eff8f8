"""Exact tokenizers: tokenizer.json, tiktoken rank files and vocab.json + merges.txt as one pipeline."""

from .errors import UnsupportedComponent
from .tokenizer import Tokenizer

__all__ = ["Tokenizer", "UnsupportedComponent"]
