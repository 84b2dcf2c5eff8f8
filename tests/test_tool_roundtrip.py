"""Real conversations round-trip through every fixture template that has a tool-call format.

For each template: render a user turn with tools (tokworker's render_chat), then that turn plus an
assistant turn making one and then two calls; the assistant turn's text is what the model generated.
Parse it whole and one character at a time with the format's parser: the calls come back (names and
arguments). Then render the next turn with the parsed ids and tool results (role "tool", tool_call_id):
the template must accept the ids and, where it writes ids, link each result to its call. transformers'
renderer checks each of our renders. Skips when ../shared/fixtures is absent.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.chat_corpus import NOW, transformers_clock
from tests.realdata import chat_templates
from tests.tool_formats import assert_split_invariant
from tokworker.templates import TemplateError, render_chat

chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")

TEMPLATES = chat_templates()
pytestmark = pytest.mark.skipif(not TEMPLATES, reason="../shared/fixtures/chat_templates is not present")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "description": "The city"},
                                         "days": {"type": "integer", "description": "How many days"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time",
                                      "parameters": {"type": "object", "properties": {}}}},
]
CALLS = [("get_weather", {"city": "São Paulo <centro>", "days": 3}), ("now", {})]
RESULTS = ["Sunny, 28 C", "12:00"]
USER = {"role": "user", "content": "Weather in São Paulo, and the time?"}

QWEN, LLAMA = "<|im_start|>assistant\n", "<|start_header_id|>assistant<|end_header_id|>\n\n"
ENDS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>")


class Case:
    """How one template writes an assistant turn: its parser, where the turn starts (header) and ends,
    how arguments go in (a dict, a JSON string, or each in turn), how many calls one turn can hold, the content
    it wants next to calls, how it links results to calls ("ids": each id is written at its call and at
    its result; None: it writes no ids), and why a shape can't be rendered."""

    def __init__(self, parser, header, ends=ENDS, args=(dict,), most=2, content="", links=None, skip=None,
                 bare_tools=False):
        self.parser, self.header, self.ends, self.args, self.most = parser, header, ends, args, most
        self.content, self.links, self.skip = content, links, skip
        # the template reads each tool as the bare function ({"name", "description", ...}); it raises on
        # OpenAI's {"type": "function", "function": ...} form, as transformers does
        self.tools = [tool["function"] for tool in TOOLS] if bare_tools else TOOLS


CASES = {
    # the ten formats that had parsers
    "Qwen-Qwen3-0.6B.jinja": Case("hermes", QWEN),
    "Qwen-Qwen2.5-7B-Instruct.jinja": Case("hermes", QWEN),
    "Qwen-QwQ-32B.jinja": Case("hermes", QWEN),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": Case("hermes", QWEN),
    "ibm-granite-granite-4.0.jinja": Case("hermes", "<|start_of_role|>assistant<|end_of_role|>", ("<|end_of_text|>",)),
    "vllm-examples-tool_chat_template_hermes.jinja": Case(
        "hermes", QWEN, skip="the template writes {\"name\": ...}, \"arguments\": ..., not the object the model is told to write"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": Case("llama3_json", LLAMA, most=1),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": Case("llama3_json", LLAMA, most=1),
    "vllm-examples-tool_chat_template_llama3.1_json.jinja": Case("llama3_json", LLAMA, most=1),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": Case("mistral", "[/INST]", ("</s>",), links="ids"),
    "vllm-examples-tool_chat_template_mistral_parallel.jinja": Case("mistral", "[/INST]", ("</s>",), links="ids"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": Case("mistral", "[/INST]", ("</s>",), links="ids"),
    "unsloth-mistral-Devstral-Small-2507.jinja": Case("mistral", "[/INST]", ("</s>",)),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": Case("mistral", "[/INST]", ("</s>",)),
    "vllm-examples-tool_chat_template_deepseekv3.jinja": Case("deepseek_v3", "<｜Assistant｜>", ("<｜end▁of▁sentence｜>",)),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": Case(
        "deepseek_v3", "<｜Assistant｜>", ("<｜end▁of▁sentence｜>",), (str,),
        skip="the template writes calls only when content is none, and apply_chat_template drops None-valued keys "
             "(transformers writes no calls either); test_tool_templates.py renders it without that step"),
    "deepseek-ai-DeepSeek-V3.1.jinja": Case("deepseek_v31", "<｜Assistant｜>", ("<｜end▁of▁sentence｜>",), (str,)),
    "moonshotai-Kimi-K2.jinja": Case("kimi_k2", "<|im_assistant|>assistant<|im_middle|>", ("<|im_end|>",), links="ids"),
    "Qwen3-Coder.jinja": Case("qwen3_coder", QWEN),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": Case("qwen3_coder", QWEN),
    "GLM-4.6.jinja": Case("glm45", "<|assistant|>", ("<|user|>", "<|observation|>")),
    "openai-gpt-oss-120b.jinja": Case("openai", "<|start|>assistant", ("<|return|>", "<|end|><|start|>user"), most=1),
    # the formats added for the fixtures
    "ByteDance-Seed-OSS.jinja": Case("seed_oss", "<seed:bos>assistant", ("<seed:eos>",)),
    "MiniMax-M2.jinja": Case("minimax_m2", "]~b]ai\n", ("[e~[",)),
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": Case(
        "cohere_command", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", ("<|START_OF_TURN_TOKEN|>",)),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": Case(
        "cohere_command2", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", ("<|END_OF_TURN_TOKEN|>",), links="index"),
    "NVIDIA-Nemotron-Nano-v2.jinja": Case("nemotron_json", "<SPECIAL_11>Assistant\n", ("<SPECIAL_12>",)),
    "fireworks-ai-llama-3-firefunction-v2.jinja": Case("firefunction_v2", LLAMA, args=(str,)),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": Case(
        "granite", "<|start_of_role|>assistant<|end_of_role|>", ("<|end_of_text|>",),
        skip="the template renders no tool calls in the history (only message content); transformers writes none either"),
    "meetkai-functionary-medium-v3.1.jinja": Case("functionary_v31", LLAMA, args=(str,)),
    "meetkai-functionary-medium-v3.2.jinja": Case("functionary_v32", LLAMA + ">>>", args=(str,)),
    # Apriel's template writes arguments|string: a dict comes out as Python's repr ({'city': ...}), which the
    # model learns to write too; a JSON string comes out as JSON
    "unsloth-Apriel-1.5.jinja": Case("apriel", "<|assistant|>\n", ("<|end|>",), args=(dict, str)),
    "Apertus-8B-Instruct.jinja": Case("apertus", "<|assistant_start|>", ("<|assistant_end|>",), args=(str,), bare_tools=True),
}


def test_every_fixture_template_with_a_tool_format_has_a_case():
    with_format = {file for file, entry in TEMPLATES.items() if entry.get("tool_call_format")}
    assert with_format <= set(CASES), sorted(with_format - set(CASES))


def _variables(entry, tools):
    variables = {k: entry[k] for k in ("bos_token", "eos_token") if entry.get(k)}
    variables.update(entry.get("extra_template_kwargs") or {})
    if entry.get("tools_json_kwarg"):
        variables[entry["tools_json_kwarg"]] = json.dumps(tools)
    return variables


@pytest.fixture(scope="module")
def oracle():
    """transformers' renderer at NOW, as ours is."""
    def render(entry, messages, add_generation_prompt, tools=TOOLS):
        return chat_template_utils.render_jinja_template(
            [copy.deepcopy(messages)], tools=tools, chat_template=entry["text"],
            add_generation_prompt=add_generation_prompt, **_variables(entry, tools))[0][0]
    with transformers_clock():
        yield render


def render(entry, messages, add_generation_prompt, oracle, tools=TOOLS):
    ours = render_chat(entry["text"], messages, tools=tools, add_generation_prompt=add_generation_prompt, now=NOW,
                       **_variables(entry, tools))
    assert ours == oracle(entry, messages, add_generation_prompt, tools)
    return ours


def tool_calls(calls, ids, kind=dict):
    """OpenAI tool_calls with the arguments as a dict or (kind str) a JSON string."""
    return [{"id": i, "type": "function",
             "function": {"name": name, "arguments": args if kind is dict else json.dumps(args, ensure_ascii=False)}}
            for i, (name, args) in zip(ids, calls)]


def assistant_text(entry, case, calls, oracle, kind=dict):
    """The model's text for an assistant turn with these calls, as the template writes it in the history."""
    ids = [f"call{i}abcd" for i in range(len(calls))]  # 9 characters: every template takes them
    messages = [USER, {"role": "assistant", "content": case.content, "tool_calls": tool_calls(calls, ids, kind)}]
    full = render(entry, messages, False, oracle, case.tools)
    start = full.index(case.header, full.index(USER["content"]))  # some templates add a generation prompt anyway
    turn = full[start + len(case.header):]
    cut = min((turn.find(end) for end in case.ends if end in turn), default=len(turn))
    return turn[:cut]


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("file", sorted(CASES))
def test_calls_round_trip_through_the_template(file, count, oracle):
    if file not in TEMPLATES:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    entry, case = TEMPLATES[file], CASES[file]
    if case.skip:
        pytest.skip(case.skip)
    if count > case.most:
        pytest.skip(f"the template writes at most {case.most} call per turn (it raises or drops the rest)")
    calls = CALLS[:count]
    prompt = render(entry, [USER], True, oracle, case.tools)
    assert case.header.rstrip(">") in prompt[-200:]  # the generation prompt opens the same assistant turn
    for kind in case.args:
        _round_trip(entry, case, calls, kind, oracle)


def _round_trip(entry, case, calls, kind, oracle):
    """The calls written by the template (arguments given as `kind`) parse back, and their ids and results
    go into the next turn."""
    count = len(calls)
    text = assistant_text(entry, case, calls, oracle, kind)

    result = assert_split_invariant(case.parser, text, TOOLS)  # whole, in one piece, one character at a time
    assert [(name, json.loads(args)) for name, args in result["calls"]] == calls, text
    leftover = "".join((result["content"] or "").split())
    assert leftover in ("", "<think></think>", "</think>", "<|START_THINKING|><|END_THINKING|>"), (text, result)

    # the next turn: the parsed calls with their ids, each answered by a tool result
    from tokworker.parsers.tools import get_tool_parser
    content, parsed = get_tool_parser(case.parser, TOOLS).parse(text)
    ids = [call["id"] for call in parsed]
    assert len(set(ids)) == len(ids)
    history = [USER, {"role": "assistant", "content": case.content,
                      "tool_calls": tool_calls([(c["function"]["name"], json.loads(c["function"]["arguments"]))
                                                for c in parsed], ids, kind)}]
    history += [{"role": "tool", "tool_call_id": i, "name": n, "content": r} for i, (n, _), r in zip(ids, calls, RESULTS)]
    try:
        turn2 = render(entry, history, True, oracle, case.tools)
    except TemplateError as error:  # pragma: no cover - a failure to report, with the template's own words
        pytest.fail(f"the template refused our ids {ids}: {error}")
    for result_text in RESULTS[:count]:
        assert result_text in turn2
    if case.links == "ids":  # written at the call and at its result
        for i in ids:
            assert turn2.count(i) >= 2, (i, turn2[-600:])
    elif case.links == "index":  # Command R7B numbers calls by position and writes that number at each result
        for k in range(count):
            assert turn2.count(f'"tool_call_id": "{k}"') >= 2


def test_kimi_links_results_under_the_models_own_ids(oracle):
    file = "moonshotai-Kimi-K2.jinja"
    if file not in TEMPLATES:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    from tokworker.parsers.tools import get_tool_parser
    entry, case = TEMPLATES[file], CASES[file]
    text = assistant_text(entry, case, CALLS, oracle)
    _, parsed = get_tool_parser("kimi_k2").parse(text)
    assert [c["id"] for c in parsed] == ["functions.get_weather:0", "functions.now:1"]
    history = [USER, {"role": "assistant", "content": "", "tool_calls": tool_calls(CALLS, [c["id"] for c in parsed])}]
    history += [{"role": "tool", "tool_call_id": c["id"], "content": r} for c, r in zip(parsed, RESULTS)]
    turn2 = render(entry, history, True, oracle)
    assert "<|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>" in turn2
    assert "## Return of functions.now:1\n12:00" in turn2.replace("\\n", "\n")


def test_mistral_templates_refuse_openai_ids_and_take_ours(oracle):
    """What broke turn two of every Mistral agent: the template raises on call_<24 hex>, as transformers does."""
    file = "Mistral-Small-3.2-24B-Instruct-2506.jinja"
    if file not in TEMPLATES:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    entry, case = TEMPLATES[file], CASES[file]
    history = [USER, {"role": "assistant", "content": "", "tool_calls": tool_calls(CALLS[:1], ["call_" + "0" * 24])},
               {"role": "tool", "tool_call_id": "call_" + "0" * 24, "content": "x"}]
    with pytest.raises(TemplateError, match="alphanumeric strings with length 9"):
        render_chat(entry["text"], history, tools=TOOLS, now=NOW, **_variables(entry, TOOLS))
    with pytest.raises(Exception, match="alphanumeric strings with length 9"):
        oracle(entry, history, True)


# the Llama 3 based formats, through a whole TextStream on Llama 3's real vocabulary
LLAMA_FORMATS = ["fireworks-ai-llama-3-firefunction-v2.jinja", "meetkai-functionary-medium-v3.1.jinja",
                 "meetkai-functionary-medium-v3.2.jinja"]


@pytest.fixture(scope="module")
def llama3():
    from tests.realdata import vocabulary
    from tokworker.tokenizer import Tokenizer, loaders
    return Tokenizer.from_tiktoken(vocabulary("llama3_tiktoken"), loaders.LLAMA3_PATTERN,
                                   loaders.llama3_special_tokens(), bos_token="<|begin_of_text|>")


@pytest.mark.parametrize("file", LLAMA_FORMATS)
def test_generated_ids_stream_through_text_stream(file, oracle, llama3):
    """The assistant turn as Llama 3 token ids, pushed one id per engine step through TextStream (detokenizer,
    special-token keeping, parser): the calls equal the whole-text parse, and a stream the engine stops
    ends in "tool_calls"."""
    from tokworker.parsers.tools import get_tool_parser
    from tokworker.parsers.tools.core.shapes import assemble
    from tokworker.protocol.deltas import StreamParams
    from tokworker.stream.state import TextStream
    if file not in TEMPLATES:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    tokenizer, case = llama3, CASES[file]
    text = assistant_text(TEMPLATES[file], case, CALLS, oracle, case.args[0])
    if case.parser == "functionary_v31":
        text += '<|python_tag|>print("hi")'  # the python tool: its special token must survive detokenizing
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    stream = TextStream(tokenizer, StreamParams(tool_parser=case.parser, tools=TOOLS))
    updates = [stream.push([i]) for i in ids] + [stream.finish("stop")]  # the engine stopped at <|eot_id|>
    streamed = assemble([d for u in updates for d in u.deltas])
    expected = get_tool_parser(case.parser, TOOLS).parse_message(text)
    assert [c["function"] for c in streamed["tool_calls"]] == [c["function"] for c in expected["tool_calls"]]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in streamed["tool_calls"]][:2] == CALLS
    assert updates[-1].finish_reason == "tool_calls"
