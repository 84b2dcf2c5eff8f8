"""mimo: Xiaomi MiMo (qwen3_coder's XML, each value written compactly right between its tags).

    <tool_call>
    <function=execute_bash>
    <parameter=command>pwd && ls</parameter>
    </function>
    </tool_call>

A value is verbatim, newlines at its edges included (vLLM's mimo parser keeps them); it is typed by the
tool's schema as qwen3_coder's are (vLLM leaves every value a string: the schema's types are what a client
validates against).
"""

from __future__ import annotations

from .qwen3_coder import Qwen3CoderToolParser


class MimoToolParser(Qwen3CoderToolParser):
    name = "mimo"
    strip_value_newlines = False
