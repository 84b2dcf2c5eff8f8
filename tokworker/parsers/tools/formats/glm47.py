"""glm47: GLM-4.7 (glm45's markup, written without the newlines).

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

The template puts nothing between the name and the first key, nor between a call's parts; the model
sometimes writes a literal backslash-n between a key and its value (vLLM's glm47 reads it as
formatting, and so do we). Values are typed as glm45 types them.
"""

from __future__ import annotations

import regex

from .glm45 import Glm45ToolParser


class Glm47ToolParser(Glm45ToolParser):
    name = "glm47"
    param_open = regex.compile(r"\s*<arg_key>(?P<key>[^<]{0,256})</arg_key>(?:\\n|\s)*<arg_value>")
