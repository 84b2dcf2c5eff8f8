"""Chat templates rendered exactly as transformers renders them, in a sandbox bounded in time and memory,
encoded so that message content can't forge control tokens (see README.md here)."""

from .apply import apply_chat_template
from .bounds import Limits
from .chatml import CHATML_TEMPLATE
from .errors import (MissingTemplateError, TemplateError, TemplateInputError, TemplateLimitError, TemplateRaisedError,
                     TemplateRenderError, TemplateSecurityError, TemplateSyntaxError, TemplateTimeoutError,
                     TemplateTooLargeError, UntrustedTemplateError)
from .render import render_chat

__all__ = ["CHATML_TEMPLATE", "Limits", "MissingTemplateError", "TemplateError", "TemplateInputError", "TemplateLimitError",
           "TemplateRaisedError", "TemplateRenderError", "TemplateSecurityError", "TemplateSyntaxError",
           "TemplateTimeoutError", "TemplateTooLargeError", "UntrustedTemplateError", "apply_chat_template",
           "render_chat"]
