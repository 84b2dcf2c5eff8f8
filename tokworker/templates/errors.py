"""The typed errors of template rendering: one base class (a ValueError, so callers that catch bad input
catch these) and one subclass per distinct cause, so a server can map each to its own status and message."""

from __future__ import annotations


class TemplateError(ValueError):
    """Rendering a chat template failed. Raised wherever transformers' apply_chat_template raises."""


class TemplateInputError(TemplateError):
    """The messages, tools, documents or switches can't be rendered (empty chat, a message that is not a
    mapping, continue_final_message with nothing to continue, ...): the caller's mistake, not the template's."""


class TemplateSyntaxError(TemplateError):
    """The template is not valid Jinja."""


class TemplateRenderError(TemplateError):
    """The template failed while rendering (an undefined value used wrongly, a type error, ...)."""


class TemplateRaisedError(TemplateRenderError):
    """The template itself refused the input, through raise_exception (roles must alternate, ...)."""


class TemplateTooLargeError(TemplateError):
    """The template's source is over the size cap, so it was not compiled."""


class TemplateLimitError(TemplateError):
    """A render went over a resource bound: output size, the size of one string, list, number or JSON dump,
    recursion depth, or the memory budget."""


class TemplateTimeoutError(TemplateLimitError):
    """Compiling or rendering took longer than the time budget and was stopped."""


class TemplateSecurityError(TemplateError):
    """The template tried something the sandbox forbids (private attributes, unsafe calls, mutation)."""


class UntrustedTemplateError(TemplateSecurityError):
    """A template that did not come with the model was supplied, and untrusted templates are not allowed."""


class MissingTemplateError(TemplateError):
    """A render needs a chat template and the model ships none; nothing is guessed (ChatML's control tokens
    may not even exist in the vocabulary). The message names the ways to supply one."""
