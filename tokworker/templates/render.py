"""render_chat: a chat template rendered exactly as transformers' apply_chat_template(tokenize=False) does,
inside the bounded sandbox.

The steps follow transformers 5.24 (tokenization_utils_base.apply_chat_template and
chat_template_utils.render_jinja_template) so the output is identical character for character, and every
input it refuses is refused here with a TemplateError subclass.
"""

from __future__ import annotations

import jinja2

from . import compiled, prepare
from .bounds import Limits
from .errors import (TemplateError, TemplateInputError, TemplateLimitError, TemplateRenderError,
                     TemplateSecurityError, TemplateTimeoutError)
from .owned import Owned, owned
from .sandbox import RENDER_NOW
from .watchdog import WATCHDOG

DEFAULT_LIMITS = Limits()
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt"})


def render_chat(template, messages, tools=None, documents=None, add_generation_prompt=True,
                continue_final_message=False, now=None, *, limits: Limits | None = None, **variables) -> str:
    """Render `messages` with `template` (a Jinja chat template string).

    `variables` carries bos_token, eos_token and the template's own switches (enable_thinking, ...).
    `now` (a datetime) fixes what strftime_now reports. `continue_final_message` (True, or the name of the
    field to continue) leaves the last message open for the model to continue. Raises TemplateError (a
    ValueError) wherever transformers raises, and its subclasses for syntax, limits, time and security."""
    prepared = prepare_chat(template, messages, tools, documents, add_generation_prompt, continue_final_message)
    return render_prepared(prepared, now=now, limits=limits, **variables)


class PreparedChat:
    """The inputs after transformers' preparation, before the template-dependent continue_final_message step."""

    __slots__ = ("template", "messages", "tools", "documents", "add_generation_prompt", "continue_final_message")

    def __init__(self, template, messages, tools, documents, add_generation_prompt, continue_final_message):
        self.template, self.messages, self.tools, self.documents = template, messages, tools, documents
        self.add_generation_prompt, self.continue_final_message = add_generation_prompt, continue_final_message


def prepare_chat(template, messages, tools=None, documents=None, add_generation_prompt=True,
                 continue_final_message=False) -> PreparedChat:
    """apply_chat_template's checks and normalization (None-valued keys dropped, objects to dicts)."""
    if isinstance(messages, (list, tuple)) and len(messages) == 0:
        raise TemplateInputError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    normalized = prepare.normalize_messages(messages)
    if continue_final_message and add_generation_prompt:
        raise TemplateInputError(
            "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when "
            "you want the model to continue the final message, and add_generation_prompt when you want to add a "
            "header that will prompt it to start a new assistant message instead.")
    return PreparedChat(template, normalized, tools, documents, add_generation_prompt, continue_final_message)


def render_prepared(chat: PreparedChat, *, now=None, limits: Limits | None = None, **variables) -> str:
    """render_jinja_template: compile, tool schemas, plain data, aliases, continue_final_message, render."""
    return render_tracked(chat, variables, {}, now=now, limits=limits)[0]


def render_tracked(chat: PreparedChat, variables: dict, own: dict, *, now=None, limits: Limits | None = None):
    """(text, given): the render of `chat` with `variables` and `own` (variables whose text counts as the
    template's own: the tokenizer's special tokens), and the (start, end) ranges of the text that the
    template did not write itself (owned.py)."""
    limits = limits or DEFAULT_LIMITS
    entry = compiled_template(chat.template, limits)
    try:
        tools = prepare.plain_data(prepare.tool_schemas(chat.tools))
        prepare.check_documents(chat.documents)
        documents = prepare.plain_data(chat.documents)
        variables = prepare.plain_data(variables)
        variables.update({name: owned(value) for name, value in prepare.plain_data(own).items()})
        messages = prepare.alias_reasoning(prepare.plain_data(chat.messages))
        continued = _tag_final_message(messages, chat.continue_final_message, chat.template)
    except TemplateError:
        raise
    except Exception as error:  # what transformers' own preparation trips on (a non-text field to continue, ...)
        raise TemplateInputError(f"{type(error).__name__}: {error}") from None
    reserved = _RESERVED.intersection(variables)
    if reserved:
        raise TemplateInputError(f"template variables may not be named {sorted(reserved)}")
    context = dict(variables, messages=messages, tools=tools, documents=documents,
                   add_generation_prompt=chat.add_generation_prompt)
    token = RENDER_NOW.set(now)
    try:
        chunks, given = _guarded(lambda: _generate(entry.template, context, limits), limits)
    finally:
        RENDER_NOW.reset(token)
    text = "".join(chunks)
    if continued is not None:
        try:
            text = _cut_at_continue_tag(text, continued)
        except AttributeError as error:
            raise TemplateInputError(f"continue_final_message needs text to continue: {error}") from None
    while given and given[-1][1] > len(text):      # continue_final_message cut the end off
        start = given.pop()[0]
        if start < len(text):
            given.append((start, len(text)))
    return text, given


def compiled_template(template: str, limits: Limits) -> compiled.CompiledTemplate:
    """The compiled template from the cache, or compiled now under the size cap and the watchdog."""
    compiled.check_size(template, limits)
    entry = compiled.cached(template, limits)
    if entry is None:
        entry = _guarded(lambda: compiled.compile_template(template, limits), limits)
    return entry


def _generate(template, context: dict, limits: Limits) -> tuple[list[str], list[tuple[int, int]]]:
    """Consume the template chunk by chunk, counting, so the output cap holds while rendering; and note the
    (start, end) ranges of the output that the template did not write itself (owned.py)."""
    parts, given, size, limit = [], [], 0, limits.max_output_chars
    given_from = 0                  # the open range of given text starts here (when below size)
    append = parts.append
    for chunk in template.generate(context):
        if type(chunk) is Owned:
            for start, end in chunk._spans:
                if given_from < size + start:
                    given.append((given_from, size + start))
                given_from = size + end
        size += len(chunk)
        if size > limit:
            raise TemplateLimitError(f"template output is over the limit of {limit:,} characters")
        append(chunk)
    if given_from < size:
        given.append((given_from, size))
    return parts, given


def _guarded(function, limits: Limits):
    """Run under the watchdog and turn every failure into the matching TemplateError."""
    try:
        return WATCHDOG.run(function, limits.time_budget, limits.max_memory_bytes, limits.wall_ceiling, "the template")
    except TemplateError:
        raise
    except TimeoutError as error:
        raise TemplateTimeoutError(str(error)) from None
    except (MemoryError, RecursionError) as error:
        raise TemplateLimitError(f"template ran out of {'memory' if isinstance(error, MemoryError) else 'stack'}: "
                                 f"{error}") from None
    except jinja2.exceptions.SecurityError as error:
        raise TemplateSecurityError(str(error)) from None
    except jinja2.TemplateSyntaxError as error:
        raise TemplateRenderError(str(error)) from None
    except Exception as error:  # the template's own failures: undefined values, type errors, ...
        raise TemplateRenderError(f"{type(error).__name__}: {error}") from None


def _tag_final_message(messages: list, continue_final_message, template: str):
    """Append the continue tag to the field being continued; return the original text (or None)."""
    if not continue_final_message:
        return None
    field = continue_final_message if isinstance(continue_final_message, str) else "content"
    final = messages[-1].get(field)
    if final is None:
        raise TemplateInputError(f'continue_final_message is set but the final message has no "{field}" to continue!')
    fields = [field]
    if field in prepare.REASONING_FIELDS:
        fields = [name for name in prepare.REASONING_FIELDS if messages[-1].get(name) == final]
    if not any(name in template for name in fields):
        raise TemplateInputError(f'continue_final_message is set to "{field}" but this is not an accepted field in '
                                 f'the chat_template')
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if "text" in block:
                original = block["text"]
                block["text"] = block["text"] + _CONTINUE_TAG
                return original
        raise TemplateInputError("continue_final_message is set but we could not find any text to continue in the "
                                 "final message!")
    for name in fields:
        messages[-1][name] = messages[-1][name] + _CONTINUE_TAG
    return final


def _cut_at_continue_tag(text: str, final) -> str:
    tag = _CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise TemplateInputError("continue_final_message is set but the final message does not appear in the chat "
                                 "after applying the chat template! This can happen if the chat template deletes "
                                 "portions of the final message.")
    at = text.rindex(tag)
    if text[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()
