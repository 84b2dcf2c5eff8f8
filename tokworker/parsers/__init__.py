"""Output parsers: text in, OpenAI deltas out.

reasoning/ splits reasoning from content; tools/ (one module per format) turns tool-call text into
tool_calls deltas; openai_chunks.py wraps a stream's updates into OpenAI ChatCompletionChunk dicts;
template_parsers.py names the parsers a chat template implies (`parsers_for_template`).
"""

from .template_parsers import parsers_for_template

__all__ = ["parsers_for_template"]
