"""The chat.completion.chunk writer's first import path; it lives in tokworker.sse.chat with the other
wire formats' writers."""

from tokworker.sse.chat import ChunkWriter, usage_event  # noqa: F401
