"""Output parsers: text in, OpenAI deltas out.

reasoning/ splits reasoning from content; tools/ (one module per format) turns tool-call text into
tool_calls deltas; template_parsers.py names the parsers a chat template implies (`parsers_for_template`).
tokworker.wire writes a stream's updates in the wire formats.
"""

from .template_parsers import parsers_for_template

__all__ = ["parsers_for_template"]
