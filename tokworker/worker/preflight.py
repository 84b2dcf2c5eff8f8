"""Refuse at start what would fail every request, before any worker starts: a tokenizer that does not load,
or not within the load budget (a hostile file that would take minutes of CPU or gigabytes to load), a model
with no chat template (and none given), a template that does not compile, and a tool or reasoning parser
that does not fit the vocabulary. `tokworker serve`, `api` and `demo` call `check_model` and print its
one-line message; a worker would otherwise start, serve, and fail each render (or parse nothing).

A parser fits when it can do its work with this vocabulary. A format whose every opening marker begins
with a control token (`<|...|>`, `<｜...｜>`, `[TOOL_CALLS]`) cannot open a call, or end a reasoning block,
without one: at least one of those tokens must be a token of the vocabulary (Mistral v3's vocabulary has
[TOOL_CALLS] but not v11's [ARGS], and serves `mistral`). A format that can open on plain text (hermes'
`<tool_call>`, pythonic's bare list, Granite's sentences) fits any vocabulary.
"""

from __future__ import annotations

import regex

from tokworker.protocol.messages import CodedError, ErrorCode
from tokworker.templates.chatml import CHATML_NAME
from tokworker.worker.options import DEFAULT_LOAD_CPU_S, DEFAULT_LOAD_MEMORY_MB, DEFAULT_MODEL_DIR

# A control token's shape: <|name|>, <｜name｜> (DeepSeek's fullwidth bars), <|name> or <name|> (Gemma 4),
# [NAME] or [/NAME] (Mistral). A marker beginning with one can be written by the model only as that token.
CONTROL_TOKEN = regex.compile(r"<[|｜][^<>]*>|<[^<>|｜]*[|｜]>|\[/?[A-Z][A-Z_]*\]")


class UnservableModel(CodedError, ValueError):
    """What check_model refuses; `message` is one line that names the model and the fix."""


def check_model(model_dir: str, chat_template: str | None = None, tool_parser: str | None = None,
                reasoning_parser: str | None = None, load_cpu_s: float = DEFAULT_LOAD_CPU_S,
                load_memory_mb: int = DEFAULT_LOAD_MEMORY_MB) -> None:
    """Load the tokenizer as a worker would, within the load budget, and refuse (UnservableModel) what would
    fail every request.

    >>> from tokworker.worker.options import DEFAULT_MODEL_DIR
    >>> try:
    ...     check_model(DEFAULT_MODEL_DIR, tool_parser="mistral")
    ... except UnservableModel as refused:
    ...     print(refused.code, refused.message.replace(str(DEFAULT_MODEL_DIR), "MODEL"))
    invalid cannot serve MODEL: --tool-call-parser mistral does not fit its vocabulary: its control token \
[TOOL_CALLS] is not in it
    """
    from tokworker.templates.apply import compile_own_templates
    from tokworker.templates.errors import TemplateError
    from tokworker.worker.server import LoadBudgetExceeded, load_within_budget

    def refuse(code: str, reason: str, cause: Exception | None = None):
        raise UnservableModel(code, f"cannot serve {model_dir}: {reason}") from cause

    try:
        tokenizer = load_within_budget(model_dir, chat_template, load_cpu_s, load_memory_mb)
    except LoadBudgetExceeded as exc:
        raise UnservableModel(exc.code, exc.message) from exc
    except Exception as exc:        # whatever a corrupt file raises: the worker would raise the same
        refuse(ErrorCode.INVALID, f"its tokenizer does not load: {_one_line(exc)}", exc)
    if tokenizer.chat_template is None:
        refuse(ErrorCode.TEMPLATE, "it ships no chat template (no chat_template in tokenizer_config.json, no "
                                   f"chat_template.jinja): give one with --chat-template FILE, or --chat-template "
                                   f"{CHATML_NAME}")
    try:
        compile_own_templates(tokenizer)
    except TemplateError as exc:
        given = chat_template if chat_template is None or "\n" not in chat_template else "TEXT"
        whose = "its chat template" if given is None else f"--chat-template {given:.80}"
        refuse(ErrorCode.TEMPLATE, f"{whose} does not compile: {_one_line(exc)}", exc)
    for flag, name, openers in (("--tool-call-parser", tool_parser, _tool_openers),
                                ("--reasoning-parser", reasoning_parser, _reasoning_openers)):
        try:
            needed = required_tokens(openers(name)) if name not in (None, "none") else []
        except ValueError as exc:   # a name no parser has: the message lists the known ones
            refuse(ErrorCode.INVALID, _one_line(exc), exc)
        if needed and all(tokenizer.token_to_id(token) is None for token in needed):
            missing = f"its control token {needed[0]} is not" if len(needed) == 1 else \
                f"none of its control tokens {', '.join(needed)} is"
            refuse(ErrorCode.INVALID, f"{flag} {name} does not fit its vocabulary: {missing} in it")


def check_spawn(spawn: dict) -> None:
    """check_model on TokenizerPool.spawn's keyword arguments (what `tokworker api` and `demo` spawn)."""
    check_model(str(spawn.get("model_dir") or DEFAULT_MODEL_DIR), spawn.get("chat_template"),
                spawn.get("tool_parser"), spawn.get("reasoning_parser"),
                spawn.get("load_cpu_s", DEFAULT_LOAD_CPU_S), spawn.get("load_memory_mb", DEFAULT_LOAD_MEMORY_MB))


def required_tokens(openers: tuple[str, ...]) -> list[str]:
    """The control tokens a format cannot work without: the one each opener begins with, when every opener
    begins with one; none when some opener is plain text (or the format has no opener).

    >>> required_tokens(("<|tool_calls_section_begin|>", "<|open|>tools<|sep|>"))
    ['<|tool_calls_section_begin|>', '<|open|>']
    >>> required_tokens(("<|tool_call|>", "<tool_call>")), required_tokens(())
    ([], [])
    """
    heads = [CONTROL_TOKEN.match(opener) for opener in openers]
    return list(dict.fromkeys(head.group() for head in heads)) if heads and all(heads) else []


def _tool_openers(name: str) -> tuple[str, ...]:
    from tokworker.parsers.tools import get_tool_parser
    return get_tool_parser(name).starts


def _reasoning_openers(name: str) -> tuple[str, ...]:
    """What ends the block: a reasoning parser's work is finding where the reasoning stops."""
    from tokworker.parsers.reasoning import get_reasoning_parser
    fmt = getattr(get_reasoning_parser(name, prompt_text=""), "fmt", None)      # harmony has no tag pair
    return fmt.ends if fmt is not None else ()


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
