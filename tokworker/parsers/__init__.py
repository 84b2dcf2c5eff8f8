"""Output parsers: text in, OpenAI deltas out.

reasoning.py splits reasoning from content; tools/ (one module per format) turns tool-call text into
tool_calls deltas; openai_chunks.py wraps a stream's updates into OpenAI ChatCompletionChunk dicts.
"""
