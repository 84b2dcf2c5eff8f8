"""Reasoning parsers: streamed == whole text, nothing shown is taken back (never half a tag), whitespace at
the edges is formatting, and the prompt (rendered by the real chat templates) decides where output starts.
Covers tokworker.parsers.reasoning.formats, tokworker.parsers.reasoning.machine and
tokworker.parsers.reasoning.prompt."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
from hypothesis import given, settings, strategies as st

from tests.cuts import cut_at
from tests.realdata import chat_templates
from tokworker.parsers.reasoning import (CONTENT, EXPECT, FORMATS, INSIDE, ReasoningParserError,
                                         ReasoningParser, get_reasoning_parser, starting_mode)

WS = " \t\r\n"


def reference(text: str, fmt, mode: str, tool_starts=()):
    """The same rules written as whole-text searches (an independent oracle for the machine): markup in
    the content is cut out, an answer wrapper's text is stripped, a label opens the block."""
    def first(tags, s):
        return re.search("|".join(map(re.escape, sorted(tags, key=len, reverse=True))), s) if tags else None

    def content_part(s, expect=False):
        out, started = "", False
        while True:
            m = first(fmt.strays + fmt.answer_starts + (fmt.starts if expect else ()), s)
            piece = s if m is None else s[:m.start()]
            if expect:
                if m is None or out or piece.strip(WS):
                    out += piece
            else:
                if not started:
                    piece = piece.lstrip(WS)
                    started = bool(piece)
                out += piece
            if m is None:
                return None, out
            if m.group() in fmt.strays:
                s = s[m.end():]  # dropped; what came before it is never read again
                continue
            if m.group() in fmt.starts:
                reasoning, content = after_reasoning(label(s[m.end():]))
                return reasoning, out + content
            rest = s[m.end():]
            done = first(fmt.answer_ends, rest)
            out += (rest if done is None else rest[:done.start()]).strip(WS)
            if done is None:
                return None, out
            s, started, expect = rest[done.end():], False, False

    def label(body):
        for tag in fmt.labels:
            if body.lstrip(WS).startswith(tag):
                return body.lstrip(WS)[len(tag):]
        return body

    def after_reasoning(body):
        m = first(fmt.ends + fmt.implicit_ends + tool_starts, body)
        if m is None:
            return body.strip(WS), ""
        implicit = m.group() in fmt.implicit_ends + tool_starts
        return body[:m.start()].strip(WS), content_part(body[m.start():] if implicit else body[m.end():])[1]

    if mode == CONTENT:
        reasoning, content = content_part(text)
    elif mode == INSIDE:
        body = text
        stripped = text.lstrip(WS)
        for tag in fmt.starts:
            if stripped.startswith(tag):
                body = stripped[len(tag):]
        reasoning, content = after_reasoning(label(body))
    else:
        reasoning, content = content_part(text, expect=True)
    return reasoning or None, content or None


def pieces_for(fmt, tool_starts=()):
    tags = fmt.starts + fmt.ends + fmt.implicit_ends + fmt.answer_starts + fmt.answer_ends + fmt.labels + tool_starts
    fragments = [t[:k] for t in tags for k in (1, 2, len(t) // 2, len(t) - 1) if k > 0]
    return st.lists(st.sampled_from(list(tags) + fragments + ["a", "b c", "\n", "\n\n", " ", "é", "日本", "🧑‍🚀", "<b>", "x>", "k>", "]"]),
                    max_size=20)


def stream(parser: ReasoningParser, parts: list[str]):
    seen_r, seen_c, snapshots = [], [], []
    for part in parts:
        for d in parser.feed(part):
            assert (d.reasoning_content is None) != (d.content is None), d
            assert d.reasoning_content != "" and d.content != ""
            (seen_r if d.reasoning_content is not None else seen_c).append(d.reasoning_content or d.content)
        snapshots.append(("".join(seen_r), "".join(seen_c)))
    for d in parser.finish():
        (seen_r if d.reasoning_content is not None else seen_c).append(d.reasoning_content or d.content)
    return ("".join(seen_r) or None, "".join(seen_c) or None), snapshots


TAG_PARSERS = sorted(name for name in FORMATS if not FORMATS[name].append_think)


@pytest.mark.parametrize("name", TAG_PARSERS)
@pytest.mark.parametrize("mode", [INSIDE, EXPECT, CONTENT])
@pytest.mark.parametrize("tool_starts", [(), ("<tool_call>",)], ids=["alone", "with-tool-calls"])
def test_split_anywhere_equals_whole_and_reference(name, mode, tool_starts):
    fmt = FORMATS[name]
    if tool_starts and (not fmt.tool_calls_end or any(t.startswith("<tool") for t in fmt.starts + fmt.ends)):
        pytest.skip("this format lets no tool call end its reasoning")

    @settings(max_examples=60, deadline=None)
    @given(pieces_for(fmt, tool_starts), st.lists(st.integers(0, 500), max_size=10))
    def check(pieces, cuts):
        text = "".join(pieces)
        expected = reference(text, fmt, mode, tool_starts)
        assert ReasoningParser(fmt, mode, tool_starts).parse(text) == expected
        result, snapshots = stream(ReasoningParser(fmt, mode, tool_starts), cut_at(text, cuts))
        assert result == expected
        for reasoning, content in snapshots:  # nothing shown is ever taken back: no half tags
            assert (expected[0] or "").startswith(reasoning) and (expected[1] or "").startswith(content)

    check()


def test_think_block_edges_are_formatting():
    parser = get_reasoning_parser("qwen3")
    assert parser.parse("<think>\nStep 1.\n\nStep 2.\n</think>\n\nThe answer is 4.") == \
        ("Step 1.\n\nStep 2.", "The answer is 4.")
    r1 = get_reasoning_parser("deepseek_r1", prompt_text="<｜User｜>2+2?<｜Assistant｜><think>\n")
    deltas = [d for ch in "Two plus two.\n</think>\n\n4" for d in r1.feed(ch)] + r1.finish()
    assert "".join(d.reasoning_content or "" for d in deltas) == "Two plus two."
    assert "".join(d.content or "" for d in deltas) == "4"
    assert all(d.content != "\n" for d in deltas)


def test_truncated_reasoning_and_formats():
    assert get_reasoning_parser("deepseek_r1").parse("still thinking") == ("still thinking", None)
    assert get_reasoning_parser("mistral").parse("[THINK]hm[/THINK]Yes.") == ("hm", "Yes.")
    assert get_reasoning_parser("mistral").parse("Just text.") == (None, "Just text.")
    assert get_reasoning_parser("seed_oss").parse("<seed:think>x</seed:think>y") == ("x", "y")
    assert get_reasoning_parser("granite").parse("Here's my thought process:\nhm\nHere is my response:\nok") == ("hm", "ok")
    assert get_reasoning_parser("kimi_k2").parse("plan<|tool_calls_section_begin|><|tool_call_begin|>") == \
        ("plan", "<|tool_calls_section_begin|><|tool_call_begin|>")
    assert get_reasoning_parser("deepseek_v3").parse("plain answer") == (None, "plain answer")


def test_unknown_parser_and_ids_without_tokenizer_are_typed_errors():
    with pytest.raises(ReasoningParserError):
        get_reasoning_parser("nope")
    with pytest.raises(ValueError):
        get_reasoning_parser("qwen3", prompt_ids=[1, 2, 3])


class _TailTokenizer:
    """The tokenizer surface get_reasoning_parser uses for prompt ids: decode of the prompt's tail."""
    def __init__(self, vocab):
        self.vocab = vocab

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.vocab[i] for i in ids)


def test_prompt_ids_are_read_through_the_tokenizer():
    tok = _TailTokenizer({0: "<|im_start|>assistant\n", 1: "<think>", 2: "\n", 3: "</think>"})
    assert get_reasoning_parser("qwen3", prompt_ids=[0, 1, 2], tokenizer=tok).parse("a</think>b") == ("a", "b")
    assert get_reasoning_parser("qwen3", prompt_ids=[0, 1, 2, 3, 2, 2], tokenizer=tok).parse("a</think>b") == \
        (None, "ab")  # the block was closed in the prompt: a stray end tag is markup, cut from the content


# ---------------------------------------------------------------- real templates decide the start
def render(template: str, **variables) -> str:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda v, ensure_ascii=False, indent=None, separators=None, sort_keys=False: \
        json.dumps(v, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime(2025, 1, 2).strftime(fmt)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, **variables)


CASES = [
    ("Qwen-Qwen3-0.6B.jinja", "qwen3", {}, EXPECT),
    ("Qwen-Qwen3-0.6B.jinja", "qwen3", {"enable_thinking": False}, CONTENT),
    ("Qwen-QwQ-32B.jinja", "qwen3", {}, INSIDE),
    ("Qwen-QwQ-32B.jinja", "deepseek_r1", {}, INSIDE),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek_r1", {}, INSIDE),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "deepseek_v3", {"thinking": True}, INSIDE),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "deepseek_v3", {"thinking": False}, CONTENT),
    ("GLM-4.6.jinja", "glm45", {}, EXPECT),
    ("GLM-4.6.jinja", "glm45", {"enable_thinking": False}, CONTENT),
    ("MiniMax-M2.jinja", "minimax_m2", {}, INSIDE),
    ("ByteDance-Seed-OSS.jinja", "seed_oss", {}, EXPECT),
    ("ByteDance-Seed-OSS.jinja", "seed_oss", {"thinking_budget": 0}, CONTENT),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "deepseek_r1", {"enable_thinking": True}, INSIDE),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "deepseek_r1", {"enable_thinking": False}, CONTENT),
    ("moonshotai-Kimi-K2.jinja", "kimi_k2", {}, EXPECT),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral", {}, EXPECT),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "nemotron_v3", {"enable_thinking": True}, INSIDE),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "nemotron_v3", {"enable_thinking": False}, CONTENT),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "cohere", {}, EXPECT),
    ("unsloth-Apriel-1.5.jinja", "apriel", {}, INSIDE),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "granite", {"thinking": True}, EXPECT),
    ("Apertus-8B-Instruct.jinja", "apertus", {"enable_thinking": True}, EXPECT),
    ("MiniMax-M2.jinja", "minimax_m2_append_think", {}, INSIDE),
]


@pytest.mark.parametrize("file,name,variables,mode", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_real_template_generation_prompts(file, name, variables, mode):
    templates = chat_templates()
    if file not in templates:
        pytest.skip("../shared/fixtures/chat_templates not present")
    entry = templates[file]
    variables = {"bos_token": entry.get("bos_token") or "", "eos_token": entry.get("eos_token") or "", **variables}
    prompt = render(entry["text"], **variables)
    assert starting_mode(FORMATS[name], prompt) == mode
    parser = get_reasoning_parser(name, prompt_text=prompt)
    if FORMATS[name].append_think:  # nothing is split off: the prompt's opening tag begins the content
        assert parser.parse("Add them.</think>4") == (None, "<think>Add them.</think>4")
        return
    answer = {INSIDE: "Add them.\n" + FORMATS[name].ends[0] + "\n\n4",
              EXPECT: FORMATS[name].starts[0] + "\nAdd them.\n" + FORMATS[name].ends[0] + "\n\n4",
              CONTENT: "4"}[mode]
    assert parser.parse(answer) == ((None, "4") if mode == CONTENT else ("Add them.", "4"))


def test_a_long_run_of_whitespace_is_held_without_rescanning():
    """A model stuck on newlines must not make each step re-scan everything held (quadratic)."""
    parser = get_reasoning_parser("qwen3")
    out = [d for _ in range(20000) for d in parser.feed("\n")]
    assert out == [] and parser._held == ""  # the whitespace waits apart, never re-scanned per step
    out += parser.feed("x\n") + parser.feed("</think>") + parser.feed("\n" * 3) + parser.feed("y") + parser.finish()
    assert [(d.reasoning_content, d.content) for d in out] == [("x", None), (None, "y")]
