"""A tool call the model opens inside a think block it never closed is a call (issue #32): the call's
opening ends the reasoning, the reasoning before it stays reasoning, and the call reaches the tool parser,
streamed token by token through the real Qwen3 tokenizer exactly as whole. The prompt is Qwen3's real chat
template with tools; the calls are what the real templates write for an assistant turn (Qwen3's hermes JSON,
and Qwen3-Coder's XML, which Qwen3.5 writes); the output shapes are the ones users reported (QwenLM/Qwen3
#1459: Qwen3-32B's calls in an unclosed block; vLLM #39056: Qwen3.5's). Only an opening the tool parser
reads a call after ends the block: the marker mentioned while thinking stays reasoning. The behaviour of
vLLM's six qwen3 reasoning test cases about such calls is ported (its cases, our assertions: whitespace at
the reasoning's edge is formatting here, and the call is read by the tool parser that ended the block), and
the other formats whose call opening is a control token are checked on their real templates' calls."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from tests.cuts import cut_at
from tests.realdata import chat_templates
from tests.test_stream_state import qwen, run, streams_alike
from tokworker.parsers.reasoning import get_reasoning_parser
from tokworker.parsers.tools import get_tool_parser
from tokworker.protocol.deltas import StreamParams
from tokworker.stream.coalesce import coalesce
from tokworker.templates.render import render_chat

QWEN3, CODER = "Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
USER = [{"role": "user", "content": "Weather in Paris?"}]
CALLED = [("get_weather", '{"city": "Paris"}')]
THOUGHT = "The user wants the weather in Paris. I should call the tool."
TOOL_PARSER = {QWEN3: "hermes", CODER: "qwen3_coder"}


def template(file: str) -> str:
    entry = chat_templates().get(file)
    if entry is None:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    return entry["text"]


def prompt(**switches) -> str:
    """Qwen3's real generation prompt with the tools: it ends at "<|im_start|>assistant\\n" (the model opens
    its own <think>), or closes an empty block there when enable_thinking=False."""
    return render_chat(template(QWEN3), USER, tools=TOOLS, add_generation_prompt=True, **switches)


def written_call(file: str) -> str:
    """The call as the model's template writes it in an assistant turn: from <tool_call> to </tool_call>."""
    call = [{"id": "call0abcd", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    turn = render_chat(template(file), USER + [{"role": "assistant", "content": "", "tool_calls": call}], tools=TOOLS,
                       add_generation_prompt=False)
    return turn[turn.rindex("<tool_call>"):turn.rindex("</tool_call>") + len("</tool_call>")]


def unclosed(file: str) -> str:
    """The issue's shape: the model opens <think>, reasons, and writes its call without closing the block."""
    return f"<think>\n{THOUGHT}\n{written_call(file)}<|im_end|>"


def closed(file: str) -> str:
    """The block closed before the call, as Qwen3's template writes an assistant turn with reasoning."""
    return f"<think>\n{THOUGHT}\n</think>\n\n{written_call(file)}<|im_end|>"


def whole(text: str, tool_name: str, prompt_text: str | None, tools=TOOLS):
    """The whole-text path: the reasoning split (knowing the tool parser's call openings), then the calls."""
    reasoning, content = get_reasoning_parser("qwen3", prompt_text=prompt_text,
                                              tool_parser=get_tool_parser(tool_name, tools)).parse(text)
    content, calls = get_tool_parser(tool_name, tools).parse(content or "")
    return reasoning, content, [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


def chunked(text: str, tool_name: str, prompt_text: str | None, pieces: list[str], tools=TOOLS):
    """The reasoning parser then the tool parser, fed `pieces` one at a time (reasoning passing by the tool
    parser, as in TextStream): the deltas, coalesced, as (reasoning, content, [(call index, name, arguments)])
    (call ids are random)."""
    reasoning = get_reasoning_parser("qwen3", prompt_text=prompt_text, tool_parser=get_tool_parser(tool_name, tools))
    calls = get_tool_parser(tool_name, tools)
    out = []
    for piece, last in [(p, False) for p in pieces] + [("", True)]:
        stage = reasoning.feed(piece) if piece else []
        stage += reasoning.finish() if last else []
        for delta in stage:
            if delta.reasoning_content:
                out.append(delta)
            if delta.content:
                out.extend(calls.feed(delta.content))
        out.extend(calls.finish() if last else [])
    return [(d.reasoning_content, d.content, [(c.index, c.function.name if c.function else None,
                                               c.function.arguments if c.function else None)
                                              for c in d.tool_calls or ()]) for d in coalesce(out)]


@pytest.fixture(scope="module")
def tok():
    return qwen()[0]


# ---------------------------------------------------------------- the issue's case, whole
@pytest.mark.parametrize("file", [QWEN3, CODER])
def test_a_call_in_an_unclosed_think_block_is_a_call(file):
    text = unclosed(file).removesuffix("<|im_end|>")
    assert whole(text, TOOL_PARSER[file], prompt()) == (THOUGHT, None, CALLED)


def test_the_issue_s_own_text_gives_the_call():
    text = '<think>I should call the tool.\n<tool_call>\n{"name": "w", "arguments": {}}\n</tool_call>'
    tools = [{"type": "function", "function": {"name": "w", "parameters": {"type": "object", "properties": {}}}}]
    assert whole(text, "hermes", None, tools) == ("I should call the tool.", None, [("w", "{}")])


# ---------------------------------------------------------------- through TextStream, token by token
@pytest.mark.parametrize("file", [QWEN3, CODER])
def test_streamed_token_by_token_through_the_real_tokenizer(tok, file):
    """Every grouping of the real ids (one id a step, two steps cut anywhere, all at once) gives the call, the
    reasoning before it, and finish_reason tool_calls; the same as the whole-text path."""
    ids = tok.encode(unclosed(file))
    assert tok.token_to_id("<tool_call>") in ids  # the opening is the vocabulary's control token
    params = StreamParams(reasoning_parser="qwen3", tool_parser=TOOL_PARSER[file], tools=TOOLS)
    content, reasoning, calls, end = streams_alike(tok, params, ids, prompt_ids=tok.encode(prompt()))
    assert (reasoning, content) == (THOUGHT, "")
    assert [(c["name"], c["arguments"]) for c in calls.values()] == CALLED
    assert end == ["tool_calls", None, False]


@pytest.mark.parametrize("file", [QWEN3, CODER])
def test_a_block_closed_before_the_call_is_unchanged(tok, file):
    """The template's own shape: reasoning up to </think>, then the call; with or without the implicit end."""
    text = closed(file)
    params = StreamParams(reasoning_parser="qwen3", tool_parser=TOOL_PARSER[file], tools=TOOLS)
    content, reasoning, calls, end = streams_alike(tok, params, tok.encode(text), prompt_ids=tok.encode(prompt()))
    assert (reasoning, content, end) == (THOUGHT, "", ["tool_calls", None, False])
    assert [(c["name"], c["arguments"]) for c in calls.values()] == CALLED
    assert whole(text.removesuffix("<|im_end|>"), TOOL_PARSER[file], prompt()) == (THOUGHT, None, CALLED)
    # the reasoning parser alone (no tool parser, so no implicit end) splits it the same way
    alone = get_reasoning_parser("qwen3", prompt_text=prompt()).parse(text.removesuffix("<|im_end|>"))
    assert alone == (THOUGHT, written_call(file))


@pytest.mark.parametrize("file", [QWEN3, CODER])
def test_thinking_off_in_the_prompt_leaves_the_call_in_the_content(tok, file):
    text = written_call(file) + "<|im_end|>"
    params = StreamParams(reasoning_parser="qwen3", tool_parser=TOOL_PARSER[file], tools=TOOLS)
    off = prompt(enable_thinking=False)
    content, reasoning, calls, end = streams_alike(tok, params, tok.encode(text), prompt_ids=tok.encode(off))
    assert (reasoning, content, end) == ("", "", ["tool_calls", None, False])
    assert [(c["name"], c["arguments"]) for c in calls.values()] == CALLED


# ---------------------------------------------------------------- the marker mentioned, not written to act
MENTION = "I will wrap the call in <tool_call> tags, as the system prompt says."


@pytest.mark.parametrize("file", [QWEN3, CODER])
def test_a_mentioned_marker_stays_reasoning_and_the_call_after_it_ends_it(tok, file):
    """The model may name its marker while it thinks: only an opening the tool parser reads a call after ends
    the reasoning (vLLM's qwen3 parser checks for <function= after <tool_call> for the same reason)."""
    params = StreamParams(reasoning_parser="qwen3", tool_parser=TOOL_PARSER[file], tools=TOOLS)
    text = f"<think>\n{MENTION}\n</think>\n\nChecking."
    content, reasoning, calls, _ = streams_alike(tok, params, tok.encode(text), prompt_ids=tok.encode(prompt()))
    assert (reasoning, content, calls) == (MENTION, "Checking.", {})
    text = f"<think>\n{MENTION}\n{written_call(file)}<|im_end|>"
    content, reasoning, calls, end = streams_alike(tok, params, tok.encode(text), prompt_ids=tok.encode(prompt()))
    assert (reasoning, content, end) == (MENTION, "", ["tool_calls", None, False])
    assert [(c["name"], c["arguments"]) for c in calls.values()] == CALLED
    assert whole(text.removesuffix("<|im_end|>"), TOOL_PARSER[file], prompt()) == (MENTION, None, CALLED)


def test_an_opening_cut_off_by_the_end_of_the_stream_stays_reasoning():
    """A header the stream ends in the middle of is no call: the held opening is given back as reasoning."""
    text = '<think>\nplan\n<tool_call>\n{"name": "get_wea'
    assert whole(text, "hermes", prompt()) == ('plan\n<tool_call>\n{"name": "get_wea', None, [])
    assert chunked(text, "hermes", prompt(), list(text)) == [('plan\n<tool_call>\n{"name": "get_wea', None, [])]


# ---------------------------------------------------------------- any chunking gives the whole's deltas
JSON_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
XML_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
PIECES = ["<think>\n", "plan it.", "\n", "\n\n", "</think>\n\n", "Sure. ", "<tool_call>", "</tool_call>", " 日本",
          "{", " <tool_call> tags", '<tool_call>\n{"name": "get_we', "<tool_call>\n<function=get_", JSON_CALL, XML_CALL]


def apart(deltas):
    """(the reasoning, the answer's deltas: content and call fragments in order). Reasoning is not ordered
    against content the tool parser still holds (a tail that may begin its marker): it passes by."""
    answer = []
    for reasoning, content, fragments in deltas:
        if reasoning is not None:
            continue
        if content is not None and answer and answer[-1][0] is not None and not answer[-1][1]:
            answer[-1] = (answer[-1][0] + content, [])
        else:
            answer.append((content, fragments))
    return "".join(r for r, _, _ in deltas if r is not None), answer


@pytest.mark.parametrize("tool_name", ["hermes", "qwen3_coder"])
def test_any_chunking_gives_the_deltas_of_the_whole(tool_name):
    """Fed in arbitrary pieces, the reasoning parser and the tool parser after it give the deltas they give
    for the whole text in one piece (coalesced: the same reasoning, and the same content and call fragments
    in order), and those are the whole-text parse's."""

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.sampled_from(PIECES), max_size=8), st.lists(st.integers(0, 400), max_size=8),
           st.sampled_from(["open", "inside", "off"]))
    @example(["<think>\n", "plan it.", "\n", JSON_CALL], [1, 9, 12, 20], "open")
    @example(["plan it.", "\n\n", XML_CALL], [3, 8, 11], "inside")
    def check(parts, cuts, where):
        text = "".join(parts)
        prompt_text = {"open": prompt(), "inside": prompt() + "<think>\n", "off": prompt(enable_thinking=False)}[where]
        alone = apart(chunked(text, tool_name, prompt_text, [text]))
        assert apart(chunked(text, tool_name, prompt_text, cut_at(text, cuts))) == alone
        assert apart(chunked(text, tool_name, prompt_text, list(text))) == alone
        # and those deltas are the whole-text parse's reasoning, content and calls
        reasoning, content, calls = whole(text, tool_name, prompt_text)
        assert alone[0] == (reasoning or "")
        assert "".join(c or "" for c, _ in alone[1]) == (content or "")
        assert len(calls) == len({i for _, fragments in alone[1] for i, _, _ in fragments})

    check()


# ---------------------------------------------------------------- vLLM's qwen3 cases, their behaviour
VLLM_CALL = "<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n</tool_call>"
BASH = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]
READ = "I need to read the file."
QWEN35_PROMPT = "<|im_start|>user\nShow /etc/hosts<|im_end|>\n<|im_start|>assistant\n<think>\n"  # Qwen3.5 opens it


@pytest.mark.parametrize("output", [READ + "\n\n" + VLLM_CALL,  # tool_call_no_think_end(_stream)
                                    "<think>" + READ + "\n\n" + VLLM_CALL])  # tool_call_with_think_no_end(_stream)
@pytest.mark.parametrize("prompt_text", [QWEN35_PROMPT, None], ids=["prompt", "no-prompt"])  # None: vLLM's view
def test_vllm_tool_call_without_think_end(output, prompt_text):
    tools = get_tool_parser("qwen3_coder", BASH)
    parser = get_reasoning_parser("qwen3", prompt_text=prompt_text, tool_parser=tools)
    assert parser.parse(output) == (READ, VLLM_CALL)
    streamed = chunked(output, "qwen3_coder", prompt_text, list(output), BASH)
    assert "".join(reasoning or "" for reasoning, _, _ in streamed) == READ
    assert whole(output, "qwen3_coder", prompt_text, BASH) == (READ, None, [("bash", '{"command": "cat /etc/hosts"}')])


def test_vllm_tool_call_implicit_reasoning_end_in_multi_token_deltas():
    parser = get_reasoning_parser("qwen3", prompt_text=QWEN35_PROMPT, tool_parser=get_tool_parser("qwen3_coder", BASH))
    deltas = parser.feed(READ + "\n\n") + parser.feed("<tool_call>\n<function=bash>") + parser.finish()
    assert "".join(d.reasoning_content or "" for d in deltas) == READ
    assert "".join(d.content or "" for d in deltas) == "<tool_call>\n<function=bash>"


def test_vllm_thinking_disabled_with_tool_call():
    """enable_thinking=False: Qwen3.5's template closes an empty block in the prompt, so all is content."""
    off = QWEN35_PROMPT.removesuffix("<think>\n") + "<think>\n\n</think>\n\n"
    output = READ + "\n\n" + VLLM_CALL
    parser = get_reasoning_parser("qwen3", prompt_text=off, tool_parser=get_tool_parser("qwen3_coder", BASH))
    assert parser.parse(output) == (None, output)
    assert whole(output, "qwen3_coder", off, BASH) == (None, READ, [("bash", '{"command": "cat /etc/hosts"}')])


def test_streams_of_the_issue_agree_across_random_groupings(tok):
    """Random id groupings of the issue's shape with a few words around the call, both tool parsers."""
    ref = qwen()[1]

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from([QWEN3, CODER]), st.lists(st.integers(0, 200), max_size=8), st.booleans())
    def check(file, cuts, closed_first):
        text = closed(file) if closed_first else unclosed(file)
        ids = ref.encode(text, add_special_tokens=False).ids
        params = StreamParams(reasoning_parser="qwen3", tool_parser=TOOL_PARSER[file], tools=TOOLS)
        (content, reasoning, calls, _), _ = run(tok, params, cut_at(ids, cuts), prompt_text=prompt())
        assert (reasoning, content) == (THOUGHT, "")
        assert json.dumps([(c["name"], c["arguments"]) for c in calls.values()]) == json.dumps(CALLED)

    check()


# ---------------------------------------------------------------- other formats whose call opening is a token
# reasoning format, its opening tag, the fixture template writing the calls (their tool parser in
# tests/test_tool_templates.py's CASES)
OTHERS = [("deepseek_v3", "<think>", "deepseek-ai-DeepSeek-V3.1.jinja"),
          ("kimi_k2", "<think>", "moonshotai-Kimi-K2.jinja"),
          ("glm45", "<think>", "GLM-4.6.jinja"),
          ("nemotron_v3", "<think>", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"),
          ("mistral", "[THINK]", "mistralai-Ministral-3-14B-Reasoning-2512.jinja")]


@pytest.mark.parametrize("reasoning_name,opening,file", OTHERS, ids=[o[0] for o in OTHERS])
def test_other_formats_end_an_unclosed_block_at_their_call(reasoning_name, opening, file):
    """The call each real template writes, opened inside a block the model never closed: a call, whole and
    one character at a time, with the reasoning before it kept."""
    tool_templates = pytest.importorskip("tests.test_tool_templates")
    template(file)
    tool_name, start, arguments, _, content = tool_templates.CASES[file]
    turn = tool_templates.assistant_turn(tool_templates.TEMPLATES[file], [("get_weather", {"city": "Paris"})],
                                         start, arguments, content)
    tool_parser = get_tool_parser(tool_name, TOOLS)
    first = min(turn.index(o) for o in tool_parser.call_openings or tool_parser.starts if o in turn)
    text = f"{opening}{THOUGHT}\n{turn[first:]}"
    reasoning, answer = get_reasoning_parser(reasoning_name, tool_parser=tool_parser).parse(text)
    assert (reasoning, answer) == (THOUGHT, turn[first:])
    calls = get_tool_parser(tool_name, TOOLS).parse(answer)[1]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("get_weather", {"city": "Paris"})]
    parser = get_reasoning_parser(reasoning_name, tool_parser=tool_parser)
    deltas = [d for ch in text for d in parser.feed(ch)] + parser.finish()
    assert "".join(d.reasoning_content or "" for d in deltas) == THOUGHT
    assert "".join(d.content or "" for d in deltas) == turn[first:]
