"""poolside_v1: Poolside's Laguna models (glm45's calls, with or without the newline after the name).

    <tool_call>get_weather
    <arg_key>city</arg_key><arg_value>Paris</arg_value>
    </tool_call>

Values are typed as glm45 types them (a string when the schema says so, else JSON when it parses; objects
and arrays the schema asks for may be Python literals too).
"""

from __future__ import annotations

from .glm45 import Glm45ToolParser


class PoolsideV1ToolParser(Glm45ToolParser):
    name = "poolside_v1"
