"""Chat templates rendered exactly as transformers renders them, in a sandbox bounded in time and memory,
encoded so that message content can't forge control tokens."""

from .bounds import Limits
from .errors import (TemplateError, TemplateInputError, TemplateLimitError, TemplateRaisedError,
                     TemplateRenderError, TemplateSecurityError, TemplateSyntaxError, TemplateTimeoutError,
                     TemplateTooLargeError, UntrustedTemplateError)
from .render import render_chat

__all__ = ["Limits", "TemplateError", "TemplateInputError", "TemplateLimitError", "TemplateRaisedError",
           "TemplateRenderError", "TemplateSecurityError", "TemplateSyntaxError", "TemplateTimeoutError",
           "TemplateTooLargeError", "UntrustedTemplateError", "render_chat"]
