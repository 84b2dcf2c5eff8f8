"""Tokenizer.apply_chat_template: pick the model's template, pass its special tokens, render, and encode
with no added token matched across text the template did not write itself (owned.py, literal.py)."""

from __future__ import annotations

from . import literal
from .chatml import CHATML_NAME, CHATML_TEMPLATE
from .errors import MissingTemplateError, TemplateInputError, UntrustedTemplateError
from .messages import normalize_openai_messages
from .render import DEFAULT_LIMITS, compiled_template, prepare_chat, render_prepared, render_tracked

_SPECIAL_NAMES = literal.SPECIAL_NAMES


def apply_chat_template(tokenizer, messages, tools=None, tokenize=True, chat_template=None, *, documents=None,
                        add_generation_prompt=False, continue_final_message=False, sanitize_control_tokens=True,
                        allow_untrusted_template=False, openai_messages=False, now=None, limits=None, **variables):
    """Render `messages` with the tokenizer's chat template and return the text, or its ids if `tokenize`.

    Like transformers' method of the same name (same template choice, same special-token variables, same
    defaults), except that content is encoded as ordinary text by default: `sanitize_control_tokens=False`
    restores transformers' plain encoding. `chat_template` may name one of the model's templates, or be a
    template of its own, which is refused unless `allow_untrusted_template` (a server passes its operator's
    setting here), or be "chatml" for the built-in CHATML_TEMPLATE. `openai_messages=True` takes messages in the
    OpenAI API's shape and normalizes them as vLLM's server does (messages.py). A model without a template,
    given none, raises MissingTemplateError (never a silent ChatML)."""
    text, ids = render_chat_prompt(tokenizer, messages, tools, chat_template, tokenize=tokenize, documents=documents,
                                   add_generation_prompt=add_generation_prompt,
                                   continue_final_message=continue_final_message,
                                   sanitize_control_tokens=sanitize_control_tokens,
                                   allow_untrusted_template=allow_untrusted_template,
                                   openai_messages=openai_messages, now=now, limits=limits, **variables)
    return ids if tokenize else text


def render_chat_prompt(tokenizer, messages, tools=None, chat_template=None, *, tokenize=True, documents=None,
                       add_generation_prompt=False, continue_final_message=False, sanitize_control_tokens=True,
                       allow_untrusted_template=False, openai_messages=False, now=None, limits=None, encode=None,
                       **variables):
    """(text, ids) of one render: what apply_chat_template returns with tokenize=False and with tokenize=True,
    for the cost of one (a server that sends both back renders once). ids is None when not `tokenize`.
    `encode(text, spans)`, when given, makes the ids instead of the tokenizer's encode (spans: the literal
    spans no added token may match across, or None): a worker cuts a long prompt into parts with it."""
    template = select_template(tokenizer, chat_template, tools, allow_untrusted_template)
    special = special_tokens(tokenizer)
    if openai_messages:
        messages = normalize_openai_messages(messages, template)
    chat = prepare_chat(template, messages, tools, documents, add_generation_prompt, continue_final_message)
    encode = encode or (lambda text, spans: tokenizer.encode(text) if spans is None else
                        tokenizer.encode_with_literal_spans(text, spans))
    if not (tokenize and sanitize_control_tokens):
        text = render_prepared(chat, now=now, limits=limits, **{**special, **variables})
        return text, encode(text, None) if tokenize else None
    controls, special_contents = literal.control_tokens(tokenizer)
    literal.check_special_overrides(variables, special, controls, special_contents)
    callers = literal.caller_variables(variables, special, special_contents)
    own = {name: value for name, value in {**special, **variables}.items() if name not in callers}
    text, given = render_tracked(chat, callers, own, now=now, limits=limits)
    # no added token may match across text the template did not write (whitespace-only ones excepted)
    return text, encode(text, given if given and controls.pattern is not None else None)


def select_template(tokenizer, chat_template, tools, allow_untrusted_template: bool) -> str:
    """transformers' get_chat_template: a name picks one of the model's templates; with none given, a dict
    of templates gives "tool_use" when there are tools and it exists, else "default". "chatml" (unless the
    model has a template of that name) is the built-in CHATML_TEMPLATE. A model without a template and no
    template given is refused, as transformers and vLLM refuse it: guessing one would prompt the model in a
    format it was not trained on."""
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, list):
        own = {entry["name"]: entry["template"] for entry in own}
    if isinstance(own, dict):
        if chat_template is not None and chat_template in own:
            return own[chat_template]
        if chat_template is None:
            if tools is not None and "tool_use" in own:
                return own["tool_use"]
            if "default" in own:
                return own["default"]
            raise TemplateInputError("This model has multiple chat templates with no default specified! Please "
                                     "either pass a chat template or the name of the template you wish to use to "
                                     f"the `chat_template` argument. Available template names are {sorted(own)}.")
    elif chat_template is None:
        if own is None:
            raise MissingTemplateError(_NO_TEMPLATE)
        return own
    if chat_template == CHATML_NAME:
        return CHATML_TEMPLATE
    known = set(own.values()) if isinstance(own, dict) else {own}
    if chat_template not in known and chat_template != CHATML_TEMPLATE and not allow_untrusted_template:
        raise UntrustedTemplateError("a chat template that did not come with the model was supplied; the "
                                     "operator has not allowed untrusted templates")
    return chat_template


def compile_own_templates(tokenizer) -> int:
    """Compile the model's own chat templates now, as a worker does at load, so that no request pays for
    the compile (60-120 ms of CPU for a real template) inside its budget; returns how many there are. A
    template that does not compile raises its TemplateError here."""
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, list):
        own = {entry["name"]: entry["template"] for entry in own}
    templates = list(own.values()) if isinstance(own, dict) else [own] if own is not None else []
    for template in templates:
        compiled_template(template, DEFAULT_LIMITS)
    return len(templates)


_NO_TEMPLATE = ("this model ships no chat template (no chat_template in tokenizer_config.json, no "
                "chat_template.jinja): give it one with `tokworker serve --chat-template FILE`, "
                "TokenizerPool.spawn(..., chat_template=FILE_OR_TEXT) or apply_chat_template(..., "
                f"chat_template=TEXT), or ask for ChatML by name with chat_template={CHATML_NAME!r}")


def special_tokens(tokenizer) -> dict:
    """The named special tokens transformers passes to every template (bos_token, eos_token, ...)."""
    config = getattr(tokenizer, "config", None)
    found = {}
    for name in _SPECIAL_NAMES:
        value = getattr(tokenizer, name, None)
        if value is None and config is not None:
            value = getattr(config, name, None)
        if value is not None:
            found[name] = str(value)
    return found
