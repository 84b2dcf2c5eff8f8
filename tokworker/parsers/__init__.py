"""Output parsers: text in, OpenAI deltas out.

reasoning.py splits reasoning from content; tools/ (one module per format) turns tool-call text into
tool_calls deltas; tokworker.sse writes a stream's updates in the wire formats (openai_chunks.py: the chat
writer's first import path).
"""
