"""The reasoning formats vLLM names (nemotron_v3, olmo3, ernie45, hunyuan_a13b, step3, gemma4, cohere,
minimax_m2_append_think, deepseek_v4, holo2, mimo, ...) on their models' own output shapes, whole and one
character at a time; markup never reaches the content; and the cases vLLM itself gets wrong, with the
behaviour chosen here:

- olmo3: vLLM's whole-text parse calls "<think>abc" (no end tag) content while its stream calls it
  reasoning. Here the prompt decides, and whole and stream agree.
- ernie45: vLLM's whole-text parse keeps the newlines inside <response>\\n...\\n</response> while its stream
  strips some of them; here an answer wrapper's edge whitespace is formatting in both.
- qwen3 with a tool parser: a call opened inside a think block the model never closed ends the reasoning,
  with Qwen3.5's XML calls (qwen3_coder) and Qwen3's hermes JSON ones alike (vLLM's qwen3 parser ends it at
  <tool_call> whatever reads the call, and only when <function= follows in its latest form; here the tool
  parser that will read the call names the openings, and without one the block goes on).
- mistral: a [/THINK] without [THINK] is dropped from the content (as vLLM's whole-text parse does; its
  stream keeps it).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tokworker.parsers.reasoning import FORMATS, ReasoningParser, get_reasoning_parser
from tokworker.parsers.tools import get_tool_parser

QWEN_PROMPT = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"

CASES = [
    # (parser, prompt text or None, model output, (reasoning, content))
    ("nemotron_v3", QWEN_PROMPT + "<think>\n", "Need a forecast.\n</think>\n\nSunny.", ("Need a forecast.", "Sunny.")),
    ("nemotron_v3", QWEN_PROMPT + "<think></think>", "Sunny.", (None, "Sunny.")),  # enable_thinking=False
    ("olmo3", QWEN_PROMPT + "<think>", "abc", ("abc", None)),
    ("olmo3", QWEN_PROMPT, "<think>abc</think>def", ("abc", "def")),
    ("olmo3", QWEN_PROMPT, "plain", (None, "plain")),
    ("ernie45", None, "abc\n</think>\n\n<response>\ndef\n</response>\n", ("abc", "def")),
    ("ernie45", None, "abc\n</think>\ndef", ("abc", "def")),
    ("hunyuan_a13b", None, "<think>\nR\n</think>\n<answer>\nA\n</answer>", ("R", "A")),
    ("hunyuan_a13b", None, "<answer>\nonly the answer\n</answer>", (None, "only the answer")),
    ("step3", None, "abc</think>xyz", ("abc", "xyz")),
    ("step3", None, "still thinking", ("still thinking", None)),
    ("gemma4", None, "<|channel>thought\nLet me add.<channel|>4", ("Let me add.", "4")),
    ("gemma4", None, "4", (None, "4")),
    ("gemma4", None, "<|channel>thoughtful words<channel|>4", ("thoughtful words", "4")),  # no label: kept
    ("cohere", None, "<|START_THINKING|>Look it up.<|END_THINKING|><|START_RESPONSE|>Sunny.<|END_RESPONSE|>",
     ("Look it up.", "Sunny.")),
    ("cohere_command3", None, "<|START_RESPONSE|>Hi.<|END_RESPONSE|>", (None, "Hi.")),
    ("cohere", None, "<|START_THINKING|>Call it.<|END_THINKING|><|START_ACTION|>[...]<|END_ACTION|>",
     ("Call it.", "<|START_ACTION|>[...]<|END_ACTION|>")),
    ("minimax_m2", "]~b]ai\n<think>\n", "plan</think>answer", ("plan", "answer")),
    ("minimax_m2_append_think", "]~b]ai\n<think>\n", "plan</think>answer", (None, "<think>plan</think>answer")),
    ("minimax_m2_append_think", None, "plan</think>answer", (None, "<think>plan</think>answer")),
    ("deepseek_v4", "<｜Assistant｜><think>", "plan<｜DSML｜tool_calls>...", ("plan", "<｜DSML｜tool_calls>...")),
    ("deepseek_v4", "<｜Assistant｜></think>", "answer", (None, "answer")),
    ("holo2", None, "plan</think>answer", ("plan", "answer")),
    ("mimo", None, "<think>plan</think>answer", ("plan", "answer")),
    # hy_v3: <think> only when reasoning_effort asks for it; without a prompt, the model's own tags decide
    ("hy_v3", None, "<think>\nplan\n</think>\nanswer", ("plan", "answer")),
    ("hy_v3", None, "just the answer", (None, "just the answer")),
    ("hy_v3", "<|hy_User|>hi<|hy_Assistant|><think></think>", "answer", (None, "answer")),
    # step3p5 (vLLM's tests): the template opens the block; the newline before and after </think> is formatting
    ("step3p5", None, "plan\n</think>\nanswer", ("plan", "answer")),
    ("step3p5", "<|im_start|>assistant\n<think>\n", "still thinking", ("still thinking", None)),
    # poolside_v1: V3's switch; the current turn begins at <assistant>
    ("poolside_v1", "<user>q</user><assistant><think>", "plan</think>answer", ("plan", "answer")),
    ("poolside_v1", None, "answer", (None, "answer")),
    ("mistral", None, "[THINK]hm[/THINK]Yes.", ("hm", "Yes.")),
    ("mistral", None, "Yes.[/THINK] Sure.", (None, "Yes. Sure.")),
    ("apertus", None, "<|inner_prefix|>hm<|inner_suffix|>ok", ("hm", "ok")),
    ("apriel", "<|assistant|>\n", "Here are my reasoning steps:\nAdd.\n[BEGIN FINAL RESPONSE]\n4\n[END FINAL RESPONSE]",
     ("Add.", "4\n")),
    ("granite", None, "<think>hm</think><response>ok</response>", ("hm", "ok")),
    ("granite", None, "Here is my thought process:\nhm\nHere is my response:\nok", ("hm", "ok")),
]


def streamed(parser, text):
    deltas = [d for ch in text for d in parser.feed(ch)] + parser.finish()
    reasoning = "".join(d.reasoning_content or "" for d in deltas) or None
    content = "".join(d.content or "" for d in deltas) or None
    return reasoning, content


@pytest.mark.parametrize("name,prompt,text,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_model_output_shapes_whole_and_one_character_at_a_time(name, prompt, text, expected):
    assert get_reasoning_parser(name, prompt_text=prompt).parse(text) == expected
    assert streamed(get_reasoning_parser(name, prompt_text=prompt), text) == expected


def test_every_name_of_vllms_list_is_served():
    for name in ("nemotron_v3", "olmo3", "ernie45", "hunyuan_a13b", "step3", "gemma4", "cohere", "minimax_m2",
                 "minimax_m2_append_think", "deepseek_v4", "holo2", "mimo", "mistral", "hy_v3", "step3p5", "poolside_v1"):
        get_reasoning_parser(name)


# ---------------------------------------------------------------- where the stream starts
PREFILLS = [
    # (parser, prompt, output, (reasoning, content))
    ("qwen3", QWEN_PROMPT + "<think>The user is asking for", " the weather.\n</think>\n\nSunny.",
     (" the weather.", "Sunny.")),
    ("qwen3", QWEN_PROMPT + "<think>\nplan\n</think>\n\nThe answer is", " sunny.", (None, " sunny.")),
    ("deepseek_r1", "<｜User｜>2+2?<｜Assistant｜><think>\nTwo plus", " two.</think>4", (" two.", "4")),
    # a system prompt that shows the format says nothing about this turn
    ("mistral", "[SYSTEM_PROMPT]Write [THINK]your draft[/THINK] first.[/SYSTEM_PROMPT][INST]2+2?[/INST]",
     "[THINK]add[/THINK]4", ("add", "4")),
    ("qwen3", "<|im_start|>system\nThink in <think></think> tags.<|im_end|>\n" + QWEN_PROMPT, "<think>add</think>4",
     ("add", "4")),
    # an earlier assistant turn's closed block does not close this one
    ("deepseek_r1", "<｜User｜>a<｜Assistant｜></think>b<｜end▁of▁sentence｜><｜User｜>c<｜Assistant｜>", "x</think>y",
     ("x", "y")),
    # Gemma 4's turns: <|turn>ROLE ... <turn|>; an earlier answer's closed thought says nothing of this one
    ("gemma4", "<bos><|turn>system\n<|think|>Think first.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n"
               "Greet back.<channel|>Hello!<turn|>\n<|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n",
     "<|channel>thought\nLet me add.<channel|>4", ("Let me add.", "4")),
    # Poolside's turns: <system>, <user>, <assistant>
    ("poolside_v1", "<user>a</user><assistant><think>x</think>b</assistant><user>c</user><assistant>", "<think>y</think>z",
     ("y", "z")),
]


@pytest.mark.parametrize("name,prompt,text,expected", PREFILLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(PREFILLS)])
def test_the_prompt_s_last_turn_decides_where_generation_starts(name, prompt, text, expected):
    assert get_reasoning_parser(name, prompt_text=prompt).parse(text) == expected
    assert streamed(get_reasoning_parser(name, prompt_text=prompt), text) == expected


# ---------------------------------------------------------------- a tool call ends an unclosed block
QWEN35 = ("The user wants the weather. I will call the tool.\n\n<tool_call>\n<function=get_weather>\n"
          "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>")


QWEN3 = ('The user wants the weather. I will call the tool.\n\n<tool_call>\n{"name": "get_weather", "arguments": '
         '{"city": "Paris"}}\n</tool_call>')


@pytest.mark.parametrize("tool_name,text", [("qwen3_coder", QWEN35), ("hermes", QWEN3)])
def test_a_tool_call_opened_inside_the_block_ends_the_reasoning(tool_name, text):
    tools = get_tool_parser(tool_name)
    parser = get_reasoning_parser("qwen3", prompt_text=QWEN_PROMPT + "<think>\n", tool_parser=tools)
    reasoning, content = parser.parse(text)
    assert reasoning == "The user wants the weather. I will call the tool."
    assert content == text[text.index("<tool_call>"):]
    assert streamed(get_reasoning_parser("qwen3", prompt_text=QWEN_PROMPT + "<think>\n", tool_parser=tools),
                    text) == (reasoning, content)
    # without a tool parser nothing reads the call, so the block goes on
    assert get_reasoning_parser("qwen3", prompt_text=QWEN_PROMPT + "<think>\n").parse(text) == (text, None)


QWEN3_TWICE = ('The user wants the weather. I could call <tool_call>\n{"name": "get_weather", "arguments": {"city": '
               '"Paris"}}\n</tool_call> but first check the city.\n</think>\n\n<tool_call>\n{"name": "get_weather", '
               '"arguments": {"city": "Paris"}}\n</tool_call>')


def test_a_hermes_call_inside_the_block_is_a_call_even_if_the_block_closes_later():
    """Qwen3's <tool_call> token inside its open block is its act (formats.py, qwen3): the block ends there,
    the text after the call is content, and the late </think> is markup, dropped."""
    prompt = QWEN_PROMPT + "<think>\n"
    first, rest = QWEN3_TWICE.split(" <tool_call>", 1)
    expected = (first, "<tool_call>" + rest.replace("</think>", ""))
    tools = get_tool_parser("hermes")
    assert get_reasoning_parser("qwen3", prompt_text=prompt, tool_parser=tools).parse(QWEN3_TWICE) == expected
    assert streamed(get_reasoning_parser("qwen3", prompt_text=prompt, tool_parser=tools), QWEN3_TWICE) == expected
    assert [c["function"]["name"] for c in get_tool_parser("hermes").parse(expected[1])[1]] == ["get_weather"] * 2


def test_a_later_end_tag_after_the_implicit_end_is_dropped():
    parser = get_reasoning_parser("qwen3", tool_parser=get_tool_parser("qwen3_coder"))
    call = "<tool_call>\n<function=f>\n</function>\n</tool_call>"
    assert parser.parse("plan" + call + "\n</think>\n\ndone") == ("plan", call + "\n\n\ndone")


# ---------------------------------------------------------------- markup never reaches the content
MARKUP = sorted(name for name, fmt in FORMATS.items() if fmt.markup and not fmt.append_think)


@pytest.mark.parametrize("name", MARKUP)
def test_no_content_delta_holds_a_markup_tag(name):
    fmt = FORMATS[name]
    tags = fmt.starts + fmt.ends + fmt.answer_starts + fmt.answer_ends
    pieces = st.lists(st.sampled_from(list(tags) + [t[:2] for t in tags] + ["a", " ", "\n", "b c"]), max_size=16)

    @settings(max_examples=60, deadline=None)
    @given(pieces, st.sampled_from(["inside", "expect", "content"]), st.integers(1, 5))
    def check(parts, mode, step):
        text = "".join(parts)
        parser = ReasoningParser(fmt, mode)
        deltas = [d for i in range(0, len(text), step) for d in parser.feed(text[i:i + step])] + parser.finish()
        for delta in deltas:
            assert not any(tag in (delta.content or "") for tag in fmt.strays), delta

    check()


@pytest.mark.parametrize("name,prompt,opening", [
    ("ernie45", None, "plan</think><response>"),  # inside an answer wrapper
    ("gemma4", None, "<|channel>"),  # where a label may still come
    ("mistral", None, ""),  # expecting a block, nothing shown yet
    ("qwen3", QWEN_PROMPT + "<think>\n", ""),  # just inside a block the prompt opened
])
def test_a_long_run_of_whitespace_is_held_without_rescanning_in_every_mode(name, prompt, opening):
    """A model stuck on newlines must not make each step re-scan everything held (quadratic)."""
    parser = get_reasoning_parser(name, prompt_text=prompt)
    parser.feed(opening)
    assert [d for _ in range(20000) for d in parser.feed("\n")] == [] and len(parser._held) < 16
    rest = parser.feed("x") + parser.finish()
    assert "".join(d.content or d.reasoning_content for d in rest).strip() == "x"
