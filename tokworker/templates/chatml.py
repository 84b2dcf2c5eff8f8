"""CHATML_TEMPLATE: ChatML, used only when asked for by name (`chat_template="chatml"`), never as a silent
fallback for a model that ships no template (its control tokens may not exist in that vocabulary).

ChatML turns (<|im_start|>role ... <|im_end|>), tools declared in the system turn as JSON inside <tools>,
calls written as <tool_call>{"name": ..., "arguments": ...}</tool_call> (the "hermes" format the tool
parsers read), results grouped into one user turn of <tool_response> blocks, reasoning in <think> blocks
kept only for the turns after the last user message, and an `enable_thinking` switch (default on; off
pre-fills an empty <think></think> so the model answers directly), in the style of Qwen3's template.
Content may be a string or a list of parts, whose text parts are joined.

operator_template: what an operator passes as the model's template (`--chat-template`, a pool's or a
worker's `chat_template` option): "chatml", a template file, or the template's text.
"""

from pathlib import Path

CHATML_NAME = "chatml"

CHATML_TEMPLATE = r"""{%- macro text_of(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part is string -%}
                {{- part -}}
            {%- elif part is mapping and part.type == 'text' -%}
                {{- part.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- elif content is defined and content is not none -%}
        {{- content -}}
    {%- endif -%}
{%- endmacro -%}
{%- set thinking = enable_thinking if enable_thinking is defined else true -%}
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if has_system -%}
        {{- text_of(messages[0].content) + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou can call the functions described below, as JSON schemas inside <tools></tools>:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nTo call one, answer with a JSON object of its name and arguments inside <tool_call></tool_call> tags:\n' -}}
    {{- '<tool_call>\n{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\n' + text_of(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for message in messages -%}
    {%- if message.role == 'user' -%}
        {%- set ns.last_user = loop.index0 -%}
    {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set content = text_of(message.content) -%}
    {%- if message.role == 'system' and loop.first -%}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif message.role == 'assistant' -%}
        {%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' -%}
        {%- if not reasoning and '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- endif -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- if reasoning and loop.index0 > ns.last_user -%}
            {{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' -}}
        {%- endif -%}
        {{- content -}}
        {%- for call in message.tool_calls or [] -%}
            {%- set call = call.function if call.function is defined else call -%}
            {%- if content or not loop.first -%}
                {{- '\n' -}}
            {%- endif -%}
            {{- '<tool_call>\n{"name": "' + call.name + '", "arguments": ' -}}
            {{- call.arguments if call.arguments is string else call.arguments | tojson -}}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if not thinking -%}
        {{- '<think>\n\n</think>\n\n' -}}
    {%- endif -%}
{%- endif -%}
"""


def operator_template(value: str) -> str:
    """The template text an operator's `chat_template` setting means: CHATML_TEMPLATE for "chatml", the
    text of a file for a path (one line, no Jinja braces), else the value itself as template text."""
    if value == CHATML_NAME:
        return CHATML_TEMPLATE
    if "\n" in value or "{" in value:
        return value
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"chat template file {value!r} does not exist (pass a template file, its text, or "
                         f"{CHATML_NAME!r})")
    return path.read_text(encoding="utf-8")
