"""tokworker's public Tokenizer: the text engine's Tokenizer plus its chat template.

The engine's Tokenizer (tokworker.tokenizer) knows nothing of templates; rendering sits a layer above it, so
the chat method is added here, on top, and the engine never imports this layer.
"""

from __future__ import annotations

from tokworker.tokenizer import Tokenizer as EngineTokenizer

from .apply import apply_chat_template


class Tokenizer(EngineTokenizer):
    """A Tokenizer whose `apply_chat_template` renders its model's chat template like transformers does."""

    def apply_chat_template(self, messages, tools=None, tokenize=True, chat_template=None, **kwargs):
        """See tokworker.templates.apply_chat_template: the text, or its ids if `tokenize`."""
        return apply_chat_template(self, messages, tools=tools, tokenize=tokenize, chat_template=chat_template,
                                   **kwargs)
